//go:build kernellab

package guest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/bpf/kernelpolicy"
)

// The hooks gpu_ext's newest ops have, in gpuext's request/validate style:
// prefetch_node (each node of the prefetch tree), the sleepable
// bpf_gpuext_migrate_range driven from a BPF workqueue (cross-block
// prefetch), and tsg_submit with bpf_gpuext_tsg_preempt.

// treeFaults models gpusim's prefetch tree on a sequential scan of one VA
// block: at each fault the nodes of 2, 4, ... 512 pages around the page are
// asked in turn (take(size, counter)), the largest taken node migrates.
func treeFaults(take func(size, counter int) bool) (faults, pagesIn int) {
	var resident [pagesPerBlock]bool
	for p := 0; p < pagesPerBlock; p++ {
		if resident[p] {
			continue
		}
		faults++
		first, last := p, p
		for size := 2; size <= pagesPerBlock; size *= 2 {
			lo := p &^ (size - 1)
			n := 1
			for q := lo; q < lo+size; q++ {
				if resident[q] {
					n++
				}
			}
			if take(size, n) {
				first, last = lo, lo+size-1
			}
		}
		for q := first; q <= last; q++ {
			if !resident[q] {
				resident[q] = true
				pagesIn++
			}
		}
	}
	return faults, pagesIn
}

// prefetch_node: nodecap takes a node when more than a quarter of it is
// resident or faulting, never one of more than 64 pages; the stock rule
// wants more than half.  On a sequential scan of a VA block the two tenants
// fault as the model says (nodecap more often: it never takes more than 64
// pages), every fault asks nodecap at each of the 9 nodes, and the stock
// tenant's driver rule is untouched.
func TestPrefetchNodeHook(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	deviceChunks(t, 64)
	spec, err := loadNodecap()
	if err != nil {
		t.Fatal(err)
	}
	pol, err := kernelpolicy.AttachSpec("nodecap", spec, "nodecap_ops")
	if err != nil {
		t.Fatalf("attach nodecap: %v", err)
	}
	defer pol.Close()
	capped := gpuCtx(t, "ctx-node-cap", mustCgroup(t, reg, "node-cap", bpf.NamedPolicyID("nodecap")))
	stock := gpuCtx(t, "ctx-node-stock", mustCgroup(t, reg, "node-stock", uint32(bpf.PrefetchDefault)))
	for _, c := range []string{capped, stock} {
		replay(t, c, fmt.Sprintf("scan 0 0 %d 1", pagesPerBlock))
	}
	sc, ss := readStats(t, capped), readStats(t, stock)
	wantCap, _ := treeFaults(func(size, n int) bool { return size <= 64 && n*4 > size })
	wantStock, _ := treeFaults(func(size, n int) bool { return n*100 > 51*size })
	if int(sc.faults) != wantCap || sc.pagesIn != pagesPerBlock || sc.nodeCalls != sc.faults*9 || sc.nodeTaken == 0 {
		t.Errorf("nodecap: %d faults, %d pages in, %d node calls (%d taken), want %d faults, %d pages, %d calls",
			sc.faults, sc.pagesIn, sc.nodeCalls, sc.nodeTaken, wantCap, pagesPerBlock, wantCap*9)
	}
	if sc.prefetched > 63*sc.faults {
		t.Errorf("nodecap prefetched %d pages in %d faults: more than 64 pages a fault", sc.prefetched, sc.faults)
	}
	if int(ss.faults) != wantStock || ss.nodeCalls != 0 {
		t.Errorf("stock: %d faults, %d node calls, want %d and 0", ss.faults, ss.nodeCalls, wantStock)
	}
	if wantCap == wantStock {
		t.Fatalf("the model gives both rules %d faults: the test shows nothing", wantCap)
	}
}

func mustCgroup(t *testing.T, reg *bpf.Registry, name string, prefetch uint32) string {
	t.Helper()
	cg, _ := tenantCgroupConfig(t, reg, name, bpf.GpuextTenantConfig{AbiVersion: bpf.ABIVersion, PrefetchPolicy: prefetch})
	return cg
}

// migrateCounters reads the core's debugfs migrate file.
func migrateCounters(t *testing.T) (calls, pages, refused uint64) {
	t.Helper()
	data, err := os.ReadFile(gpuextDir + "/migrate")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscanf(string(data), "calls %d pages %d refused %d", &calls, &pages, &refused); err != nil {
		t.Fatalf("migrate %q: %v", data, err)
	}
	return calls, pages, refused
}

// attachXblock attaches the xblock policy until the test ends and returns a
// reader of its xblock_results slots.
func attachXblock(t *testing.T) func(slot uint32) uint64 {
	t.Helper()
	spec, err := loadXblock()
	if err != nil {
		t.Fatal(err)
	}
	pol, err := kernelpolicy.AttachSpec("xblock", spec, "xblock_ops")
	if err != nil {
		t.Fatalf("attach xblock: %v", err)
	}
	t.Cleanup(func() { pol.Close() })
	results, ok := pol.Map("xblock_results")
	if !ok {
		t.Fatal("no xblock_results map")
	}
	return func(slot uint32) uint64 {
		var v uint64
		if err := results.Lookup(slot, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// Cross-block prefetch on a strided scan: blocks 56..63, 8 touches 64 pages
// apart in each.  The stock prefetch faults on every touch (64).  xblock,
// at the first fault of block 56, migrates 57..60 from a BPF workqueue
// through bpf_gpuext_migrate_range; they then fault 0 times; block 61
// faults again and migrates 62 and 63, and the core refuses 64 and 65
// (past the driver's 64 blocks).  So 16 faults instead of 64, 6 blocks
// migrated whole without a fault, 2 requests refused.
func TestCrossBlockPrefetchStridedScan(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	deviceChunks(t, 64)
	result := attachXblock(t)
	xb := gpuCtx(t, "ctx-xblock", mustCgroup(t, reg, "xblock", bpf.NamedPolicyID("xblock")))
	stock := gpuCtx(t, "ctx-xblock-stock", mustCgroup(t, reg, "xblock-stock", uint32(bpf.PrefetchDefault)))
	calls0, pages0, refused0 := migrateCounters(t)
	triggered := uint64(0)
	for b := 56; b < 64; b++ {
		line := fmt.Sprintf("scan %d 0 8 64", b)
		replay(t, stock, line)
		before := readStatsQuiet(t, xb).faults
		replay(t, xb, line)
		if readStatsQuiet(t, xb).faults > before {
			triggered++ // a first fault: xblock queued its work
		}
		// The workqueue runs after the replay lets go of gpusim: wait for it.
		deadline := time.Now().Add(5 * time.Second)
		for result(0) < 4*triggered && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	sx, ss := readStats(t, xb), readStats(t, stock)
	calls, pages, refused := migrateCounters(t)
	t.Logf("xblock results: calls %d pages %d refused %d; core: calls %d pages %d refused %d",
		result(0), result(1), result(2), calls-calls0, pages-pages0, refused-refused0)
	if ss.faults != 64 {
		t.Errorf("stock faulted %d times on 64 strided touches, want 64", ss.faults)
	}
	if sx.faults != 16 || sx.migrations != 6 || sx.migrated != 6*pagesPerBlock {
		t.Errorf("xblock: %d faults, %d migrations of %d pages, want 16 faults and 6 migrations of %d pages",
			sx.faults, sx.migrations, sx.migrated, 6*pagesPerBlock)
	}
	if result(0) != 8 || result(2) != 2 || refused-refused0 != 2 || pages-pages0 != 6*pagesPerBlock {
		t.Errorf("migrate requests %d (refused %d; core refused %d, migrated %d pages), want 8, 2 refused past the last block, %d pages",
			result(0), result(2), refused-refused0, pages-pages0, 6*pagesPerBlock)
	}
}

// runlistCmd writes one command to gpusim's runlist file.
func runlistCmd(t *testing.T, cmd string) {
	t.Helper()
	if err := os.WriteFile(gpusimDir+"/runlist", []byte(cmd), 0); err != nil {
		t.Fatalf("runlist %q: %v", cmd, err)
	}
}

// A latency-critical TSG's wait when a best-effort TSG holds the engine:
// stock, it waits out the best-effort TSG's timeslice (1024 us); with the
// preempt policy, tsg_submit asks to preempt the best-effort TSG and waits
// only for the preemption (gpusim models 300 us; gpu_ext reports 312 us).
// A policy that also asks to preempt another latency-critical TSG is
// refused, and the whole call is stock again (1024 us).  The policy saw
// the creating task's comm through bpf_get_current_comm.
func TestPreemptBestEffortTSG(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	lcDir, _ := schedTenant(t, reg, "preempt-lc", bpf.PriorityLatencyCritical, 0, 0)
	beDir, _ := schedTenant(t, reg, "preempt-be", bpf.PriorityBestEffort, 0, 0)
	lc := gpuCtx(t, "ctx-preempt-lc", lcDir)
	be := gpuCtx(t, "ctx-preempt-be", beDir)

	wait := func(what string, greedy bool) tsgState {
		t.Helper()
		for _, n := range []string{"pre-be", "pre-lc", "pre-lc2"} {
			ctx := lc
			if n == "pre-be" {
				ctx = be
			}
			if err := newTSG(t, n, ctx); err != nil {
				t.Fatalf("%s: create %s: %v", what, n, err)
			}
		}
		runlistCmd(t, "run pre-be")
		runlistCmd(t, "submit pre-lc")
		tsgs, _ := runlist(t)
		for _, n := range []string{"pre-be", "pre-lc", "pre-lc2"} {
			destroyTSG(t, n)
		}
		t.Logf("%s: lc %+v be %+v", what, tsgs["pre-lc"], tsgs["pre-be"])
		if be := tsgs["pre-be"]; tsgs["pre-lc"].waitUs == 300 && be.preempted != 1 {
			t.Errorf("%s: the latency-critical TSG waited 300 us but the best-effort one was preempted %d times", what, be.preempted)
		}
		return tsgs["pre-lc"]
	}
	if got := wait("stock", false).waitUs; got != stockTimesliceUs {
		t.Errorf("stock: the latency-critical TSG waited %d us, want the best-effort timeslice %d", got, stockTimesliceUs)
	}

	for _, greedy := range []bool{false, true} {
		spec, err := loadPreempt()
		if err != nil {
			t.Fatal(err)
		}
		if greedy {
			if err := spec.Variables["preempt_greedy"].Set(uint32(1)); err != nil {
				t.Fatal(err)
			}
		}
		pol, err := kernelpolicy.AttachSpec("preempt", spec, "preempt_ops")
		if err != nil {
			t.Fatalf("attach preempt: %v", err)
		}
		got := wait(fmt.Sprintf("preempt (greedy %v)", greedy), greedy).waitUs
		ops := schedOps(t)
		t.Logf("sched_ops: %s", ops)
		if !greedy && (got != 300 || !strings.Contains(ops, "preempts 1")) {
			t.Errorf("preempt: the latency-critical TSG waited %d us (sched_ops %q), want 300 and one preemption", got, ops)
		}
		if greedy && (got != stockTimesliceUs || !strings.Contains(ops, "refused 1") || !strings.Contains(ops, "preempts 0")) {
			t.Errorf("greedy: waited %d us (sched_ops %q), want stock %d with one refused request and no preemption",
				got, ops, stockTimesliceUs)
		}
		if !greedy {
			m, _ := pol.Map("preempt_comm")
			var comm [16]byte
			if err := m.Lookup(uint32(0), &comm); err != nil {
				t.Fatal(err)
			}
			want := filepath.Base(os.Args[0])
			if len(want) > 15 {
				want = want[:15]
			}
			if got := strings.TrimRight(string(comm[:]), "\x00"); got != want {
				t.Errorf("bpf_get_current_comm in tsg_init gave %q, want the creating task %q", got, want)
			}
		}
		pol.Close()
	}
}

// migrateDelay sets gpusim's migrate_delay_ms (each migration sleeps that
// long first, inside the core's SRCU read section); 0 again at cleanup.
func migrateDelay(t *testing.T, ms int) {
	t.Helper()
	if err := os.WriteFile(gpusimDir+"/migrate_delay_ms", []byte(fmt.Sprint(ms)), 0); err != nil {
		t.Fatalf("migrate_delay_ms %d: %v", ms, err)
	}
	t.Cleanup(func() { os.WriteFile(gpusimDir+"/migrate_delay_ms", []byte("0"), 0) })
}

// destroyCtx destroys a gpusim context and says how long the write took.
func destroyCtx(t *testing.T, name string) time.Duration {
	t.Helper()
	start := time.Now()
	if err := os.WriteFile(gpusimDir+"/ctl", []byte("destroy "+name), 0); err != nil {
		t.Fatalf("destroy %s: %v", name, err)
	}
	return time.Since(start)
}

// A context without migrate ops (an RM channel group: NVIDIA destroys it
// under RM's GPU lock, which a migration may need) is destroyed without
// waiting for migrations of other contexts: while xblock's migration of
// another context sleeps 1.5 s in gpusim, destroying the no-migrate context
// returns at once and the migration is still running; destroying a
// migratable context (a UVM VA space) then waits until that migration has
// returned.  A migration a policy asks for a no-migrate context is refused,
// and create/destroy cycles of both kinds keep working.
func TestNoMigrateContextDestroyDoesNotWaitForMigrations(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	deviceChunks(t, 64)
	result := attachXblock(t)
	waitResult := func(what string, want uint64) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for result(0) < want && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if got := result(0); got < want {
			t.Fatalf("%s: xblock made %d migrate requests, want %d", what, got, want)
		}
	}
	cg := mustCgroup(t, reg, "nomig", bpf.NamedPolicyID("xblock"))

	// A fault in a no-migrate context: xblock asks to migrate blocks 1..4 of it, all refused.
	nm := gpuCtxCmd(t, "create-nomigrate", "ctx-nomig-refused", cg)
	_, _, refused0 := migrateCounters(t)
	replay(t, nm, "touch 0 0")
	waitResult("no-migrate context", 4)
	for deadline := time.Now().Add(time.Second); result(2) < 4 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond) // xblock counts a refusal after the request
	}
	_, _, refused := migrateCounters(t)
	if s := readStats(t, nm); s.migrations != 0 || result(2) != 4 || refused-refused0 != 4 {
		t.Errorf("no-migrate context: %d migrations served, xblock refused %d, core refused %d; want 0, 4, 4",
			s.migrations, result(2), refused-refused0)
	}

	// A slow migration of a migratable context, in flight while the others are destroyed.
	mig := gpuCtx(t, "ctx-nomig-slow", cg)
	gpuCtxCmd(t, "create-nomigrate", "ctx-nomig-victim", cg)
	gpuCtx(t, "ctx-nomig-va", cg)
	migrateDelay(t, 1500)
	calls0, _, _ := migrateCounters(t)
	replay(t, mig, "touch 0 0") // xblock queues the migration of blocks 1..4
	deadline := time.Now().Add(5 * time.Second)
	for calls, _, _ := migrateCounters(t); calls == calls0 && time.Now().Before(deadline); calls, _, _ = migrateCounters(t) {
		time.Sleep(5 * time.Millisecond)
	}
	if calls, _, _ := migrateCounters(t); calls == calls0 {
		t.Fatal("xblock's migration never started")
	}
	took := destroyCtx(t, "ctx-nomig-victim")
	inFlight := readStatsQuiet(t, mig).migrations == 0
	t.Logf("no-migrate destroy took %v; the migration still in flight after it: %v", took, inFlight)
	if took > time.Second || !inFlight {
		t.Errorf("destroying a no-migrate context during a 1.5 s migration took %v (migration still running after: %v), want under 1s while it runs",
			took, inFlight)
	}
	took = destroyCtx(t, "ctx-nomig-va")
	served := readStatsQuiet(t, mig).migrations
	t.Logf("migratable destroy took %v; migrations served by then: %d", took, served)
	if served == 0 {
		t.Errorf("destroying a migratable context returned after %v with the migration in flight, want it to wait", took)
	}
	os.WriteFile(gpusimDir+"/migrate_delay_ms", []byte("0"), 0)
	waitResult("slow migration", 8)
	if s := readStats(t, mig); s.migrations != 4 {
		t.Errorf("slow context: %d migrations served, want 4", s.migrations)
	}

	// Cycles of both kinds, then a fault in a fresh one of each.
	for i := 0; i < 20; i++ {
		for _, create := range []string{"create", "create-nomigrate"} {
			name := fmt.Sprintf("ctx-nomig-cycle-%d", i)
			gpuCtxCmd(t, create, name, cg)
			replay(t, filepath.Join(gpusimDir, name), "touch 0 0")
			destroyCtx(t, name)
		}
	}
	waitResult("cycles", 8+2*20*4)
}
