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
	spec, err := loadXblock()
	if err != nil {
		t.Fatal(err)
	}
	pol, err := kernelpolicy.AttachSpec("xblock", spec, "xblock_ops")
	if err != nil {
		t.Fatalf("attach xblock: %v", err)
	}
	defer pol.Close()
	results, ok := pol.Map("xblock_results")
	if !ok {
		t.Fatal("no xblock_results map")
	}
	result := func(slot uint32) uint64 {
		var v uint64
		if err := results.Lookup(slot, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
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
