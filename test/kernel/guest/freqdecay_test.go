//go:build kernellab

package guest

import (
	"testing"

	"github.com/gpuext/gpuext/bpf"
)

// Frequency decay (freq-decay, gpu_ext's per-process frequency decay)
// against lfu and the stock order on one workload, four tenants with 3
// chunks each of a device of 12.  Blocks 0, 1, 2 arrive in that order;
// block 1 is then touched 4 times, block 0 3 times, block 2 never.  Blocks
// 3 and 4 then fault in, each evicting one of the tenant's chunks:
//
//	freq-decay period=4  0 2   block 0's 3 touches earn no recency (fewer than 4): it ranks by arrival, oldest;
//	                           then 2 (arrival) before 1 (its 4th touch) and 3 (newest arrival)
//	freq-decay period=1  2 1   every touch refreshes: plain LRU
//	stock (LRU)          2 1   by last touch
//	lfu (decay 50)       2 3   fewest accesses: 2 (1 access), then the new block 3 (1) against 0 (4 -> 2) and 1 (5 -> 2.5)
func TestFreqDecayEvictionOrder(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	deviceChunks(t, 12)
	for _, p := range []string{"freq-decay", "lfu"} {
		defer attach(t, p).Close()
	}
	fd4 := selectConfig(t, map[string]string{"eviction.gpuext.io": "freq-decay:period=4"})
	if fd4.EvictionParam != 4 {
		t.Fatalf("freq-decay:period=4: the tenant config carries eviction param %d, want 4", fd4.EvictionParam)
	}
	cases := []struct {
		name  string
		cfg   bpf.GpuextTenantConfig
		order string
	}{
		{"freq-decay period=4", fd4, "0 2"},
		{"freq-decay period=1", bpf.GpuextTenantConfig{AbiVersion: bpf.ABIVersion,
			EvictionPolicy: uint32(bpf.EvictFreqDecay), EvictionParam: 1}, "2 1"},
		{"stock", bpf.GpuextTenantConfig{AbiVersion: bpf.ABIVersion}, "2 1"},
		{"lfu", bpf.GpuextTenantConfig{AbiVersion: bpf.ABIVersion,
			EvictionPolicy: uint32(bpf.EvictLFU), EvictionParam: 50}, "2 3"},
	}
	ctxs := make([]string, len(cases))
	for i, c := range cases {
		cg, _ := tenantCgroupConfig(t, reg, "fd-"+string(rune('a'+i)), c.cfg)
		ctxs[i] = gpuCtx(t, "ctx-fd-"+string(rune('a'+i)), cg)
		replay(t, ctxs[i], touchBlocks(0, 1, 2, 1, 1, 1, 1, 0, 0, 0)...)
	}
	for i := range cases { // the device is full: each evicts its own
		replay(t, ctxs[i], touchBlocks(3, 4)...)
	}
	for i, c := range cases {
		s := readStats(t, ctxs[i])
		if s.evicted != c.order {
			t.Errorf("%s: evicted [%s], want [%s]", c.name, s.evicted, c.order)
		}
		policy := uint64(2) // the tenant's ops ordered both evictions; stock none
		if c.name == "stock" {
			policy = 0
		}
		if s.evictions != 2 || s.policyEvictions != policy {
			t.Errorf("%s: %d evictions, %d by the policy, want 2, %d", c.name, s.evictions, s.policyEvictions, policy)
		}
	}
}
