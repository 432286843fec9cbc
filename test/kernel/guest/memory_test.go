//go:build kernellab

package guest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/bpf/kernelpolicy"
)

// The memory-model tests: gpusim's device of root chunks, VA blocks of 512
// pages, faults serviced through the prefetch hook and evictions through
// evict_prepare (kmod/gpusim/README.md).  They assert the orders and counts
// each policy defines, read back from gpusim's per-context stats.

const pagesPerBlock = 512

// memStats is what gpusim's <ctx>/stats file reports.
type memStats struct {
	tenant                                        uint32
	chunks                                        int
	touches, faults, pagesIn, pagesOut, evictions uint64
	prefetched, policyFaults, policyEvictions     uint64
	serviceNs                                     uint64
	migrations, migrated, nodeCalls, nodeTaken    uint64
	evicted, resident                             string
}

func readStats(t *testing.T, ctx string) memStats {
	t.Helper()
	s := readStatsQuiet(t, ctx)
	t.Logf("%s: %+v", filepath.Base(ctx), s)
	return s
}

// readStatsQuiet reads a context's stats file without logging it.
func readStatsQuiet(t *testing.T, ctx string) memStats {
	t.Helper()
	data, err := os.ReadFile(ctx + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	var s memStats
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		k, v, _ := strings.Cut(line, " ")
		n, _ := strconv.ParseUint(v, 10, 64)
		switch k {
		case "tenant":
			s.tenant = uint32(n)
		case "chunks":
			s.chunks = int(n)
		case "touches":
			s.touches = n
		case "faults":
			s.faults = n
		case "pages_in":
			s.pagesIn = n
		case "pages_out":
			s.pagesOut = n
		case "evictions":
			s.evictions = n
		case "prefetched":
			s.prefetched = n
		case "policy_faults":
			s.policyFaults = n
		case "policy_evictions":
			s.policyEvictions = n
		case "service_ns":
			s.serviceNs = n
		case "migrations":
			s.migrations = n
		case "migrated":
			s.migrated = n
		case "node_calls":
			s.nodeCalls = n
		case "node_taken":
			s.nodeTaken = n
		case "evicted":
			s.evicted = v
		case "resident":
			s.resident = v
		}
	}
	return s
}

// deviceChunks sizes the simulated device memory in 2 MiB root chunks.
func deviceChunks(t *testing.T, n int) {
	t.Helper()
	if err := os.WriteFile(gpusimDir+"/ctl", []byte(fmt.Sprintf("mem %d", n)), 0); err != nil {
		t.Fatalf("size device to %d chunks: %v", n, err)
	}
}

// replay writes trace lines to a context's trace file.
func replay(t *testing.T, ctx string, lines ...string) {
	t.Helper()
	if err := os.WriteFile(ctx+"/trace", []byte(strings.Join(lines, "\n")), 0); err != nil {
		t.Fatalf("%s: replay %q: %v", filepath.Base(ctx), lines, err)
	}
}

// touchBlocks touches page 0 of each VA block in order.
func touchBlocks(blocks ...int) []string {
	var lines []string
	for _, b := range blocks {
		lines = append(lines, fmt.Sprintf("touch %d 0", b))
	}
	return lines
}

func memTenant(t *testing.T, reg *bpf.Registry, name string, ev bpf.EvictionPolicy, pf bpf.PrefetchPolicy) string {
	t.Helper()
	cg, _ := tenantCgroupConfig(t, reg, name, bpf.GpuextTenantConfig{
		AbiVersion: bpf.ABIVersion, EvictionPolicy: uint32(ev), PrefetchPolicy: uint32(pf)})
	return gpuCtx(t, "ctx-"+name, cg)
}

// Two tenants share one device of 8 chunks with 6 VA blocks each (1.5x
// oversubscribed).  Both fill their share (blocks 0..3), both re-touch
// block 0, then both touch blocks 4 and 5: each evicts two of its own
// chunks, FIFO in arrival order (0 1) even though 0 was re-touched, LRU
// skipping the re-touched block (1 2).
func TestOversubscribedFIFOvsLRU(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	deviceChunks(t, 8)
	for _, p := range []string{"fifo", "lru"} {
		defer attach(t, p).Close()
	}
	a := memTenant(t, reg, "mem-fifo", bpf.EvictFIFO, bpf.PrefetchDefault)
	b := memTenant(t, reg, "mem-lru", bpf.EvictLRU, bpf.PrefetchDefault)

	replay(t, a, touchBlocks(0, 1, 2, 3)...)
	replay(t, b, touchBlocks(0, 1, 2, 3)...)
	replay(t, a, touchBlocks(0)...)
	replay(t, b, touchBlocks(0)...)
	replay(t, a, touchBlocks(4, 5)...)
	replay(t, b, touchBlocks(4, 5)...)

	sa, sb := readStats(t, a), readStats(t, b)
	for _, c := range []struct {
		name              string
		s                 memStats
		evicted, resident string
	}{
		{"fifo tenant", sa, "0 1", "2 3 4 5"},
		{"lru tenant", sb, "1 2", "0 3 4 5"},
	} {
		if c.s.evicted != c.evicted || c.s.resident != c.resident {
			t.Errorf("%s: evicted [%s] resident [%s], want evicted [%s] resident [%s]",
				c.name, c.s.evicted, c.s.resident, c.evicted, c.resident)
		}
		// 7 touches, 6 first touches of a block fault (one page each: the
		// tree rule does not prefetch a lone page), 2 chunks leave.
		if c.s.touches != 7 || c.s.faults != 6 || c.s.pagesIn != 6 || c.s.pagesOut != 2 ||
			c.s.evictions != 2 || c.s.policyEvictions != 2 || c.s.tenant == 0 {
			t.Errorf("%s: counts %+v, want touches 7 faults 6 pages_in 6 pages_out 2 evictions 2 (by the policy) and a tenant", c.name, c.s)
		}
	}
	tenants, err := os.ReadFile(gpusimDir + "/tenants")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tenants:\n%s", tenants)
	for _, s := range []memStats{sa, sb} {
		if s.serviceNs == 0 {
			t.Errorf("tenant %d: no fault service time for %d faults", s.tenant, s.faults)
		}
		want := fmt.Sprintf("tenant %d contexts 1 chunks 4 touches 7 faults 6 pages_in 6 pages_out 2 evictions 2 prefetched 0 service_ns %d", s.tenant, s.serviceNs)
		if !strings.Contains(string(tenants), want) {
			t.Errorf("tenants file lacks %q", want)
		}
	}
}

// LFU against LRU on a hot set: blocks 0 and 1 are touched 5 times, then
// a scan of cold blocks 2..7 runs through a share of 4 chunks.  LFU evicts
// only cold blocks and the hot set stays resident (re-touching it faults
// 0 times); LRU evicts the hot blocks first.
func TestLFUKeepsHotSet(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	deviceChunks(t, 8)
	for _, p := range []string{"lfu", "lru"} {
		defer attach(t, p).Close()
	}
	a := memTenant(t, reg, "mem-lfu", bpf.EvictLFU, bpf.PrefetchDefault)
	b := memTenant(t, reg, "mem-lru2", bpf.EvictLRU, bpf.PrefetchDefault)
	var hot []string
	for i := 0; i < 5; i++ {
		hot = append(hot, touchBlocks(0, 1)...)
	}
	for _, ctx := range []string{a, b} {
		replay(t, ctx, hot...)
		replay(t, ctx, touchBlocks(2, 3)...) // the device is now full: 4 chunks each
	}
	for _, ctx := range []string{a, b} {
		replay(t, ctx, touchBlocks(4, 5, 6, 7)...)
	}
	before := map[string]uint64{a: readStats(t, a).faults, b: readStats(t, b).faults}
	for _, ctx := range []string{a, b} {
		replay(t, ctx, touchBlocks(0, 1)...)
	}
	sa, sb := readStats(t, a), readStats(t, b)
	if sa.evicted != "2 3 4 5" {
		t.Errorf("lfu evicted [%s], want the cold blocks [2 3 4 5]", sa.evicted)
	}
	if got := sa.faults - before[a]; got != 0 {
		t.Errorf("lfu: re-touching the hot set faulted %d times, want 0", got)
	}
	if !strings.HasPrefix(sb.evicted, "0 1 2 3") {
		t.Errorf("lru evicted [%s], want the hot blocks first [0 1 2 3 ...]", sb.evicted)
	}
	if got := sb.faults - before[b]; got != 2 {
		t.Errorf("lru: re-touching the hot set faulted %d times, want 2", got)
	}
}

// MRU: a cyclic scan of 6 blocks over a share of 4 chunks; MRU evicts the
// block touched last, so the start of the cycle stays resident.
func TestMRUKeepsScanHead(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	deviceChunks(t, 4)
	defer attach(t, "mru").Close()
	a := memTenant(t, reg, "mem-mru", bpf.EvictMRU, bpf.PrefetchDefault)
	replay(t, a, touchBlocks(0, 1, 2, 3, 4, 5)...)
	s := readStats(t, a)
	// 4 evicts 3 (most recent), 5 evicts 4.
	if s.evicted != "3 4" || s.resident != "0 1 2 5" {
		t.Errorf("mru: evicted [%s] resident [%s], want evicted [3 4] resident [0 1 2 5]", s.evicted, s.resident)
	}
}

// Prefetch none: every page touched faults once, nothing is prefetched;
// re-touching resident pages does not fault.
func TestPrefetchNoneFaultsEqualPagesTouched(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	deviceChunks(t, 64)
	defer attach(t, "none").Close()
	a := memTenant(t, reg, "pf-none", bpf.EvictDefault, bpf.PrefetchNone)
	const pages = 2 * pagesPerBlock
	replay(t, a, fmt.Sprintf("scan 0 0 %d 1", pages), "scan 0 0 100 3", "touch 3 7")
	s := readStats(t, a)
	if s.faults != pages+1 || s.pagesIn != pages+1 || s.prefetched != 0 || s.policyFaults != s.faults {
		t.Errorf("none: faults %d pages_in %d prefetched %d policy_faults %d, want %d, %d, 0 and all faults by the policy",
			s.faults, s.pagesIn, s.prefetched, s.policyFaults, pages+1, pages+1)
	}
	if s.touches != pages+101 {
		t.Errorf("touches %d, want %d", s.touches, pages+101)
	}
}

// Always-max: a sequential scan of 4 VA blocks faults once per block and
// brings the rest of each block in as prefetch.  The stock tree rule on the
// same scan faults 17 times per block (pages 0 1 2 4 8 16 32 64 65 128
// 129 130 256 257 258 260 264: a region is taken once more than 51% of
// it would be resident).
func TestPrefetchAlwaysMaxOneFaultPerBlock(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	deviceChunks(t, 64)
	defer attach(t, "always-max").Close()
	a := memTenant(t, reg, "pf-max", bpf.EvictDefault, bpf.PrefetchAlwaysMax)
	stock := memTenant(t, reg, "pf-stock", bpf.EvictDefault, bpf.PrefetchDefault)
	const blocks = 4
	scan := fmt.Sprintf("scan 0 0 %d 1", blocks*pagesPerBlock)
	replay(t, a, scan)
	replay(t, stock, scan)
	s, st := readStats(t, a), readStats(t, stock)
	if s.faults != blocks || s.pagesIn != blocks*pagesPerBlock || s.prefetched != blocks*(pagesPerBlock-1) {
		t.Errorf("always-max: faults %d pages_in %d prefetched %d, want %d, %d, %d",
			s.faults, s.pagesIn, s.prefetched, blocks, blocks*pagesPerBlock, blocks*(pagesPerBlock-1))
	}
	if st.faults != 17*blocks || st.policyFaults != 0 || st.pagesIn != blocks*pagesPerBlock {
		t.Errorf("stock tree rule: faults %d (policy %d) pages_in %d, want %d, 0, %d",
			st.faults, st.policyFaults, st.pagesIn, 17*blocks, blocks*pagesPerBlock)
	}
}

// Stride: touches 4 pages apart over 4 VA blocks.  Without prefetch every
// touch faults; the stride policy sees the stride after two faults per
// block and then brings 8 strides ahead in with each fault.
func TestPrefetchStrideCutsFaults(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	deviceChunks(t, 64)
	defer attach(t, "none").Close()
	defer attach(t, "stride").Close()
	none := memTenant(t, reg, "pf-none2", bpf.EvictDefault, bpf.PrefetchNone)
	stride := memTenant(t, reg, "pf-stride", bpf.EvictDefault, bpf.PrefetchStride)
	const step, blocks = 4, 4
	touches := blocks * pagesPerBlock / step
	scan := fmt.Sprintf("scan 0 0 %d %d", touches, step)
	replay(t, none, scan)
	replay(t, stride, scan)
	sn, ss := readStats(t, none), readStats(t, stride)
	if sn.faults != uint64(touches) {
		t.Errorf("none: %d faults for %d strided touches", sn.faults, touches)
	}
	factor := float64(sn.faults) / float64(ss.faults)
	t.Logf("stride %d pages: faults %d without prefetch, %d with pf_stride: %.1fx fewer (pages in %d vs %d)",
		step, sn.faults, ss.faults, factor, sn.pagesIn, ss.pagesIn)
	if factor < 6 {
		t.Errorf("stride prefetch cut faults %.1fx (%d -> %d), want at least 6x", factor, sn.faults, ss.faults)
	}
	if ss.policyFaults != ss.faults {
		t.Errorf("stride: %d of %d faults decided by the policy", ss.policyFaults, ss.faults)
	}
}

// systemOps names the memory ops that arbitrates a full device across tenants.
func systemOps(t *testing.T, name string) {
	t.Helper()
	if err := os.WriteFile(gpuextDir+"/system", []byte(name), 0); err != nil {
		t.Fatalf("set system ops %q: %v", name, err)
	}
	t.Cleanup(func() { os.WriteFile(gpuextDir+"/system", []byte("none"), 0) })
}

// Tenant quota: tenant "over" has a quota of 2 chunks, "under" none; each
// fills half of an 8-chunk device (4 chunks), then "under" touches 3 more
// blocks.  Stock (fair share) makes "under" evict its own chunks; with
// tenant_quota as the system ops the first two evictions come out of the
// over-quota tenant (its LRU blocks 0 1) until it is back at its quota, and
// only then does "under" give up its own.
func TestTenantQuotaEvictsOverShareFirst(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	deviceChunks(t, 8)
	defer attach(t, "lru").Close()
	defer attach(t, "tenant-quota").Close()
	const chunk = 2 << 20
	overCg, _ := tenantCgroupConfig(t, reg, "quota-over", bpf.GpuextTenantConfig{
		AbiVersion: bpf.ABIVersion, Flags: uint32(bpf.TenantFlagQuota), QuotaBytes: 2 * chunk,
		EvictionPolicy: uint32(bpf.EvictTenantQuota)})
	underCg, _ := tenantCgroupConfig(t, reg, "quota-under", bpf.GpuextTenantConfig{
		AbiVersion: bpf.ABIVersion, EvictionPolicy: uint32(bpf.EvictLRU)})

	run := func(suffix string) (over, under memStats) {
		o := gpuCtx(t, "over"+suffix, overCg)
		u := gpuCtx(t, "under"+suffix, underCg)
		replay(t, o, touchBlocks(0, 1, 2, 3)...)
		replay(t, u, touchBlocks(0, 1, 2, 3)...)
		replay(t, u, touchBlocks(4, 5, 6)...)
		over, under = readStats(t, o), readStats(t, u)
		for _, c := range []string{o, u} { // give the device back for the next run
			if err := os.WriteFile(gpusimDir+"/ctl", []byte("destroy "+filepath.Base(c)), 0); err != nil {
				t.Fatal(err)
			}
		}
		return over, under
	}

	over, under := run("-stock")
	if over.evicted != "" || under.evicted != "0 1 2" {
		t.Errorf("stock: over evicted [%s], under evicted [%s]; want [] and [0 1 2] (fair share)", over.evicted, under.evicted)
	}

	systemOps(t, "tenant_quota")
	over, under = run("-quota")
	if over.evicted != "0 1" || over.resident != "2 3" || over.policyEvictions != 2 {
		t.Errorf("quota: over-quota tenant evicted [%s] resident [%s] (%d by its policy), want evicted [0 1] resident [2 3] by the policy",
			over.evicted, over.resident, over.policyEvictions)
	}
	if under.evicted != "0" || under.resident != "1 2 3 4 5 6" {
		t.Errorf("quota: under-quota tenant evicted [%s] resident [%s], want evicted [0] resident [1 2 3 4 5 6]", under.evicted, under.resident)
	}
	dev, _ := os.ReadFile(gpusimDir + "/device")
	ops, _ := os.ReadFile(gpuextDir + "/ops")
	t.Logf("device:\n%sops:\n%s", dev, ops)
	if !strings.Contains(string(dev), "arbitrated 2") {
		t.Errorf("device %q: want 2 evictions arbitrated by the system ops", dev)
	}
}

// Block notifications: a test policy counts block_activate (a VA block got
// a chunk) and block_access (a touch of a block holding one) per cgroup;
// the counts must match the replayed trace exactly.
func TestBlockActivateAccessNotifications(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	deviceChunks(t, 64)
	spec, err := loadBlockcount()
	if err != nil {
		t.Fatal(err)
	}
	pol, err := kernelpolicy.AttachSpec("blockcount", spec, "blockcount_ops")
	if err != nil {
		t.Fatalf("attach blockcount: %v", err)
	}
	defer pol.Close()
	cg, id := tenantCgroupConfig(t, reg, "mem-blocks", bpf.GpuextTenantConfig{
		AbiVersion: bpf.ABIVersion, EvictionPolicy: uint32(bpf.EvictPriorityWeighted)})
	c := gpuCtx(t, "ctx-mem-blocks", cg)
	// 14 touches over 3 blocks: 3 activate a block, 11 touch a block that holds a chunk.
	replay(t, c, "touch 0 0", "touch 0 1", "touch 0 0", "touch 1 5", "scan 2 0 10 1")
	s := readStats(t, c)
	m, ok := pol.Map("block_counts")
	if !ok {
		t.Fatal("no block_counts map")
	}
	var got struct{ Activates, Accesses, MaxAccessCount uint64 }
	if err := m.Lookup(uint64(id), &got); err != nil {
		t.Fatalf("no notifications for cgroup %d: %v", id, err)
	}
	t.Logf("notifications: %+v", got)
	if got.Activates != 3 || got.Accesses != 11 || s.touches != 14 {
		t.Errorf("activates %d accesses %d for %d touches, want 3 and 11 for 14", got.Activates, got.Accesses, s.touches)
	}
	// Block 2 is touched 10 times: the last access notification sees 9 earlier touches.
	if got.MaxAccessCount != 9 {
		t.Errorf("largest access_count %d, want 9", got.MaxAccessCount)
	}
}

// Sequential prefetch follows its tenant's prefetch_param: two tenants
// scanning 4 VA blocks with 32 and 128 pages per fault fault 16 and 4 times
// per block, and migrate exactly the pages they scan.
func TestPrefetchSequentialTenantParam(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	deviceChunks(t, 64)
	defer attach(t, "sequential").Close()
	const blocks = 4
	for _, pages := range []uint64{32, 128} {
		cg, _ := tenantCgroupConfig(t, reg, fmt.Sprintf("pf-seq-%d", pages), bpf.GpuextTenantConfig{
			AbiVersion: bpf.ABIVersion, PrefetchPolicy: uint32(bpf.PrefetchSequential), PrefetchParam: pages})
		c := gpuCtx(t, fmt.Sprintf("ctx-pf-seq-%d", pages), cg)
		replay(t, c, fmt.Sprintf("scan 0 0 %d 1", blocks*pagesPerBlock))
		s := readStats(t, c)
		want := uint64(blocks * pagesPerBlock / int(pages))
		if s.faults != want || s.policyFaults != want || s.pagesIn != blocks*pagesPerBlock {
			t.Errorf("sequential %d pages: faults %d (policy %d) pages_in %d, want %d faults by the policy and %d pages",
				pages, s.faults, s.policyFaults, s.pagesIn, want, blocks*pagesPerBlock)
		}
	}
}

// Tree threshold as a policy reads the block's residency through the core
// and takes its threshold from the tenant: at 51% it faults exactly like
// the driver's stock rule (17 per block on a sequential scan); at 26% it
// prefetches sooner (7 per block), at 90% later (354 per block).
func TestPrefetchTreeThresholdTenantParam(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	deviceChunks(t, 64)
	defer attach(t, "tree-threshold").Close()
	const blocks = 2
	for _, c := range []struct{ threshold, perBlock uint64 }{{51, 17}, {26, 7}, {90, 354}} {
		cg, _ := tenantCgroupConfig(t, reg, fmt.Sprintf("pf-tree-%d", c.threshold), bpf.GpuextTenantConfig{
			AbiVersion: bpf.ABIVersion, PrefetchPolicy: uint32(bpf.PrefetchTreeThreshold), PrefetchParam: c.threshold})
		ctx := gpuCtx(t, fmt.Sprintf("ctx-pf-tree-%d", c.threshold), cg)
		replay(t, ctx, fmt.Sprintf("scan 0 0 %d 1", blocks*pagesPerBlock))
		s := readStats(t, ctx)
		if s.faults != blocks*c.perBlock || s.policyFaults != s.faults || s.pagesIn != blocks*pagesPerBlock {
			t.Errorf("tree %d%%: faults %d (policy %d) pages_in %d, want %d by the policy and %d pages",
				c.threshold, s.faults, s.policyFaults, s.pagesIn, blocks*c.perBlock, blocks*pagesPerBlock)
		}
	}
}

// Priority-weighted arbitration: a latency-critical tenant holding 5 of 8
// chunks and a best-effort one holding 3.  Stock (fair share) would make the
// latency-critical tenant, over its half, evict its own chunks when it grows;
// with prio_weighted as the system ops the best-effort tenant's memory
// weighs 16x and all three of its chunks leave first, in its LRU order.
func TestPriorityWeightedEvictsLowerClassFirst(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	deviceChunks(t, 8)
	defer attach(t, "priority-weighted").Close()
	systemOps(t, "prio_weighted")
	tenant := func(name string, class bpf.PriorityClass) string {
		cg, _ := tenantCgroupConfig(t, reg, name, bpf.GpuextTenantConfig{AbiVersion: bpf.ABIVersion,
			PriorityClass: uint32(class), EvictionPolicy: uint32(bpf.EvictPriorityWeighted)})
		return gpuCtx(t, "ctx-"+name, cg)
	}
	be := tenant("prio-be", bpf.PriorityBestEffort)
	lc := tenant("prio-lc", bpf.PriorityLatencyCritical)
	replay(t, be, touchBlocks(0, 1, 2)...)
	replay(t, lc, touchBlocks(0, 1, 2, 3, 4)...) // the device is full
	replay(t, lc, touchBlocks(5, 6, 7)...)
	sb, sl := readStats(t, be), readStats(t, lc)
	if sb.evicted != "0 1 2" || sb.chunks != 0 {
		t.Errorf("best-effort tenant evicted [%s] and holds %d chunks, want [0 1 2] and 0", sb.evicted, sb.chunks)
	}
	if sl.evicted != "" || sl.resident != "0 1 2 3 4 5 6 7" {
		t.Errorf("latency-critical tenant evicted [%s] resident [%s], want nothing evicted and all 8 resident", sl.evicted, sl.resident)
	}
}
