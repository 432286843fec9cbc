//go:build kernellab

package guest

import (
	"testing"

	"github.com/gpuext/gpuext/bpf"
)

// Per-tenant parameters of the catalog's eviction policies: one attached
// ops, two tenants with different parameters, two different outcomes.

// LFU with aging (lfu decay, from each tenant's eviction.gpuext.io
// annotation through the catalog): chunk 1 is touched 8 times, then three
// evictions age the scores, then chunk 2 is touched 3 times.  Scores after
// the fourth pass (one access = 1):
//
//	decay=90: chunk 1 8 -> 0.8 -> 0.08 -> 0.008, chunk 2 3: 1 leaves first
//	decay=10: chunk 1 8 -> 7.2 -> 6.5 -> 5.8,    chunk 2 3: 2 leaves first
func TestLFUDecayPerTenant(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	defer attach(t, "lfu").Close()
	for _, c := range []struct {
		decay, order string
	}{{"90", "1 2"}, {"10", "2 1"}} {
		cfg := selectConfig(t, map[string]string{"eviction.gpuext.io": "lfu:decay=" + c.decay})
		if cfg.EvictionParam == 0 {
			t.Fatalf("decay=%s: the tenant config carries no eviction param: %+v", c.decay, cfg)
		}
		cg, _ := tenantCgroupConfig(t, reg, "lfu-decay-"+c.decay, cfg)
		ctx := gpuCtx(t, "ctx-lfu-decay-"+c.decay, cg)
		ctl(t, ctx, "alloc 1", "alloc 2")
		for i := 0; i < 8; i++ {
			ctl(t, ctx, "touch 1")
		}
		for i := 0; i < 3; i++ {
			evict(t, ctx)
		}
		ctl(t, ctx, "touch 2", "touch 2", "touch 2")
		expect(t, "lfu decay="+c.decay, evict(t, ctx), "lfu", c.order)
	}
}

// Priority-weighted arbitration with a weight per tenant: two standard
// tenants hold 4 chunks each of 8, A with weight 1 and B with weight 8, A's
// chunks the older.  A latency-critical tenant then needs two chunks.  With
// one weight for both the scores tie and the least recently used context
// (A) would give up both; with B's weight 8 B's memory weighs 8x and B
// gives up both, A keeps all four.
func TestPriorityWeightPerTenant(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	deviceChunks(t, 8)
	defer attach(t, "priority-weighted").Close()
	systemOps(t, "prio_weighted")
	tenant := func(name string, class bpf.PriorityClass, weight uint64) string {
		cg, _ := tenantCgroupConfig(t, reg, name, bpf.GpuextTenantConfig{AbiVersion: bpf.ABIVersion,
			PriorityClass: uint32(class), EvictionPolicy: uint32(bpf.EvictPriorityWeighted), EvictionParam: weight})
		return gpuCtx(t, "ctx-"+name, cg)
	}
	a := tenant("weight-a", bpf.PriorityStandard, 1)
	b := tenant("weight-b", bpf.PriorityStandard, 8)
	lc := tenant("weight-lc", bpf.PriorityLatencyCritical, 0)
	replay(t, a, touchBlocks(0, 1, 2, 3)...)
	replay(t, b, touchBlocks(0, 1, 2, 3)...) // the device is full
	replay(t, lc, touchBlocks(0, 1)...)
	sa, sb := readStats(t, a), readStats(t, b)
	if sa.evicted != "" || sa.chunks != 4 {
		t.Errorf("weight-1 tenant evicted [%s] and holds %d chunks, want nothing evicted and 4", sa.evicted, sa.chunks)
	}
	if sb.evicted != "0 1" || sb.chunks != 2 {
		t.Errorf("weight-8 tenant evicted [%s] and holds %d chunks, want [0 1] and 2", sb.evicted, sb.chunks)
	}
}
