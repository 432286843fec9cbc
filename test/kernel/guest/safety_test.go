//go:build kernellab

package guest

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/bpf/kernelpolicy"
)

// A prefetch policy that asks for a region past the VA block is refused on
// every fault: the driver's tree rule applies (17 faults for a sequential
// scan of one block, as without a policy) and the core counts each refusal.
func TestPrefetchOutOfRangeRefused(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	deviceChunks(t, 64)
	spec, err := loadRoguePrefetch()
	if err != nil {
		t.Fatal(err)
	}
	rogue, err := kernelpolicy.AttachSpec("rogue-prefetch", spec, "rogue_prefetch_ops")
	if err != nil {
		t.Fatalf("attach rogue prefetch: %v", err)
	}
	defer rogue.Close()
	c := memTenant(t, reg, "pf-rogue", bpf.EvictDefault, bpf.PrefetchTreeThreshold)
	replay(t, c, fmt.Sprintf("scan 0 0 %d 1", pagesPerBlock))
	s := readStats(t, c)
	if s.faults != 17 || s.policyFaults != 0 || s.pagesIn != pagesPerBlock {
		t.Errorf("faults %d (policy %d) pages_in %d, want the stock 17 (policy 0) and %d", s.faults, s.policyFaults, s.pagesIn, pagesPerBlock)
	}
	ops, _ := os.ReadFile(gpuextDir + "/ops")
	t.Logf("gpuext ops: %s", strings.TrimSpace(string(ops)))
	if !strings.Contains(string(ops), "pf_tree calls 17 handled 0 errors 0 refused 17") {
		t.Errorf("core counters %q, want pf_tree calls 17 handled 0 errors 0 refused 17", ops)
	}
}

// moduleRefs is gpuext.ko's reference count (gpusim and each attached ops hold one).
func moduleRefs(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/sys/module/gpuext/refcnt")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// Detaching and re-attaching policies while two tenants replay an
// oversubscribed workload: no oops (the lab fails on any BUG/WARNING in the
// kernel log), no error from the driver, the module's references back to
// where they were, and after the last detach the tenants run stock.
func TestDetachMidWorkload(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	deviceChunks(t, 6)
	// What stays once every ops is gone: the modules that depend on gpuext (gpusim).
	holders, err := os.ReadDir("/sys/module/gpuext/holders")
	if err != nil {
		t.Fatal(err)
	}
	refs := fmt.Sprint(len(holders))
	a := memTenant(t, reg, "churn-lfu", bpf.EvictLFU, bpf.PrefetchStride)
	b := memTenant(t, reg, "churn-fifo", bpf.EvictFIFO, bpf.PrefetchAlwaysMax)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, ctx := range []string{a, b} {
		wg.Add(1)
		go func(ctx string) {
			defer wg.Done()
			trace := []byte("scan 0 0 40 64\ntouch 0 0\ntouch 0 1\n") // 5 blocks each: 10 for 6 chunks
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := os.WriteFile(ctx+"/trace", trace, 0); err != nil {
					errs <- fmt.Errorf("%s: %w", ctx, err)
					return
				}
				time.Sleep(2 * time.Millisecond) // let the attach loop run on the lab's one CPU
			}
		}(ctx)
	}
	for round := 0; round < 2; round++ {
		var attached []*kernelpolicy.Attached
		for _, name := range []string{"lfu", "fifo", "stride", "always-max"} {
			attached = append(attached, attach(t, name))
		}
		for _, p := range attached {
			if err := p.Close(); err != nil {
				t.Errorf("round %d: detach %s: %v", round, p.Name, err)
			}
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("replay during churn: %v", err)
	}
	// A detached struct_ops map drops its module reference after an RCU
	// grace period, from a work item: wait for it.
	got := moduleRefs(t)
	for deadline := time.Now().Add(5 * time.Second); got != refs && time.Now().Before(deadline); got = moduleRefs(t) {
		time.Sleep(50 * time.Millisecond)
	}
	if got != refs {
		t.Errorf("gpuext refcnt %s after detaching everything, want %s", got, refs)
	}
	if ops, _ := os.ReadFile(gpuextDir + "/ops"); strings.TrimSpace(string(ops)) != "" {
		t.Errorf("ops still listed after detach: %q", ops)
	}
	// Stock from now on: no fault or eviction is decided by a policy.
	before := readStats(t, a)
	replay(t, a, "scan 0 0 40 64", "scan 0 0 40 64")
	after := readStats(t, a)
	if after.policyFaults != before.policyFaults || after.policyEvictions != before.policyEvictions {
		t.Errorf("after detach: policy decided %d faults and %d evictions, want none",
			after.policyFaults-before.policyFaults, after.policyEvictions-before.policyEvictions)
	}
	if after.touches-before.touches != 80 || after.faults == before.faults {
		t.Errorf("replayed %d touches (%d faults) after detach, want 80 with faults",
			after.touches-before.touches, after.faults-before.faults)
	}
	if before.policyFaults == 0 || before.policyEvictions == 0 {
		t.Errorf("policies decided %d faults and %d evictions during the churn, want some of each",
			before.policyFaults, before.policyEvictions)
	}
}
