//go:build kernellab

package guest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/bpf/kernelpolicy"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/policies"
)

// The SDK test, guest half: lab.sh built examples/two-queue and
// examples/seq-adapt outside the tree with only the SDK and installed them
// into /lab/policydir (a kernelPolicyDir); the fixtures of sdkpolicies/ are
// in /lab/sdkobjects.
const (
	labPolicyDir  = "/lab/policydir"
	labSDKObjects = "/lab/sdkobjects"
)

// dirLoader loads the lab's policy directory and returns a loader pinning
// under a bpffs directory of the test's own; its policies detach at cleanup.
func dirLoader(t *testing.T) (*kernelpolicy.Dir, *kernelpolicy.Loader) {
	t.Helper()
	dir, err := kernelpolicy.LoadDir(labPolicyDir)
	if err != nil {
		t.Fatalf("load %s: %v", labPolicyDir, err)
	}
	pin := filepath.Join("/sys/fs/bpf", "policydir-"+strings.ReplaceAll(t.Name(), "/", "-"))
	if err := os.MkdirAll(pin, 0o700); err != nil {
		t.Fatal(err)
	}
	l := &kernelpolicy.Loader{PinDir: pin, Core: kernelpolicy.DefaultCore()}
	t.Cleanup(func() {
		ents, _ := os.ReadDir(l.LinksDir())
		for _, e := range ents {
			if err := l.Detach(e.Name()); err != nil {
				t.Errorf("detach %s: %v", e.Name(), err)
			}
		}
		os.RemoveAll(pin)
	})
	return dir, l
}

func attachFromDir(t *testing.T, dir *kernelpolicy.Dir, l *kernelpolicy.Loader, name string) {
	t.Helper()
	p, ok := dir.Get(name)
	if !ok {
		t.Fatalf("%s not in %s (has %v)", name, labPolicyDir, dir.Names())
	}
	a, err := l.AttachPolicy(p, kernelpolicy.AttachOptions{})
	if err != nil {
		t.Fatalf("attach %s: %v", name, err)
	}
	a.Close()
}

// selectConfig selects a policy as a container's annotations would, under
// the catalog that config builds with the lab's policy directory, and
// returns the tenant config admission writes for it.
func selectConfig(t *testing.T, annotations map[string]string) bpf.GpuextTenantConfig {
	t.Helper()
	cat, err := admission.Catalog(config.Config{KernelPolicyDir: labPolicyDir})
	if err != nil {
		t.Fatalf("catalog with %s: %v", labPolicyDir, err)
	}
	sel, err := cat.Select(policies.Request{Annotations: annotations})
	if err != nil {
		t.Fatalf("select %v: %v", annotations, err)
	}
	cfg := bpf.GpuextTenantConfig{AbiVersion: bpf.ABIVersion}
	for _, a := range []struct {
		alg   policies.Algorithm
		id    *uint32
		param *uint64
	}{{sel.Policy.Memory.Eviction, &cfg.EvictionPolicy, &cfg.EvictionParam}, {sel.Policy.Memory.Prefetch, &cfg.PrefetchPolicy, &cfg.PrefetchParam}} {
		if a.alg.Name == "default" {
			continue
		}
		*a.id = bpf.NamedPolicyID(bpf.OpsName(a.alg.Name))
		for _, v := range a.alg.Params {
			*a.param = uint64(v)
		}
	}
	return cfg
}

// The workload of the 2Q test on the driver's chunk list (gpusim's alloc
// and touch): an alloc is not an access, so chunks arrive with no access
// counted.  Chunk 1 is touched twice after it arrives, chunk 2 once, 3, 4
// and 5 never.
//
//	LRU (stock)                  3 2 1 4 5   (by last access)
//	2Q hot-accesses=2 (default)  2 3 4 5 1   (touched fewer than twice first, by arrival; then 1)
//	2Q hot-accesses=1            3 4 5 2 1   (the untouched first, by arrival; then the touched, LRU)
func twoQueueWorkload(t *testing.T, ctx string) {
	ctl(t, ctx, "alloc 1", "alloc 2", "touch 1", "alloc 3", "touch 2", "touch 1", "alloc 4", "alloc 5")
}

const twoQueueDefaultOrder = "2 3 4 5 1"

func TestPolicyDirTwoQueueEvictionOrder(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	dir, l := dirLoader(t)
	attachFromDir(t, dir, l, "two-queue")

	st, err := l.Core.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if !listedWithID(st, "two_queue", bpf.NamedPolicyID("two_queue")) {
		t.Fatalf("core lists %+v, want ops two_queue with id %#x", st, bpf.NamedPolicyID("two_queue"))
	}
	def, _ := tenantCgroupConfig(t, reg, "twoq-default", selectConfig(t, map[string]string{"eviction.gpuext.io": "two-queue"}))
	hot1, _ := tenantCgroupConfig(t, reg, "twoq-hot1", selectConfig(t, map[string]string{"eviction.gpuext.io": "two-queue:hot-accesses=1"}))
	plain, _ := tenantCgroupConfig(t, reg, "twoq-plain", bpf.GpuextTenantConfig{AbiVersion: bpf.ABIVersion})
	a, b, c := gpuCtx(t, "ctx-twoq-default", def), gpuCtx(t, "ctx-twoq-hot1", hot1), gpuCtx(t, "ctx-twoq-plain", plain)
	for _, ctx := range []string{a, b, c} {
		twoQueueWorkload(t, ctx)
	}
	expect(t, "2Q hot-accesses=2 (the default)", evict(t, a), "two_queue", twoQueueDefaultOrder)
	expect(t, "2Q hot-accesses=1", evict(t, b), "two_queue", "3 4 5 2 1")
	expect(t, "tenant without a policy", evict(t, c), "stock", "3 2 1 4 5")

	if err := l.Detach("two-queue"); err != nil {
		t.Fatalf("detach: %v", err)
	}
	expect(t, "2Q tenant after detach", evict(t, a), "stock", "3 2 1 4 5")
}

// 2Q on chunks that arrive by a fault, as every chunk of a real workload
// does: the touch that faults a chunk in is its first access, so at the
// default (2 accesses) a chunk is protected only once touched again, and a
// one-pass scan leaves before the re-used set.  Three tenants share a
// device of 12 chunks (4 each) and replay, phase by phase:
//
//	fault 0 1, touch 0 1 again, fault 2 3 (scanned once), fault 4 5, touch 4 5 again, fault 6
//
//	2Q default          evicted 2 3 0   (the scan by arrival; once all are hot, LRU)
//	2Q hot-accesses=1   evicted 0 1 2   (every faulted chunk is hot: LRU)
//	stock LRU           evicted 0 1 2
func TestPolicyDirTwoQueueFaultedChunks(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	deviceChunks(t, 12)
	dir, l := dirLoader(t)
	attachFromDir(t, dir, l, "two-queue")
	def, _ := tenantCgroupConfig(t, reg, "twoqf-default", selectConfig(t, map[string]string{"eviction.gpuext.io": "two-queue"}))
	hot1, _ := tenantCgroupConfig(t, reg, "twoqf-hot1", selectConfig(t, map[string]string{"eviction.gpuext.io": "two-queue:hot-accesses=1"}))
	ctxs := []string{
		gpuCtx(t, "ctx-twoqf-default", def),
		gpuCtx(t, "ctx-twoqf-hot1", hot1),
		gpuCtx(t, "ctx-twoqf-stock", mustCgroup(t, reg, "twoqf-stock", 0)),
	}
	for _, phase := range [][]int{{0, 1}, {0, 1}, {2, 3}, {4, 5}, {4, 5}, {6}} {
		for _, ctx := range ctxs {
			replay(t, ctx, touchBlocks(phase...)...)
		}
	}
	for i, want := range []struct {
		what, evicted, resident string
		byPolicy                uint64
	}{
		{"2Q hot-accesses=2 (the default)", "2 3 0", "1 4 5 6", 3},
		{"2Q hot-accesses=1", "0 1 2", "3 4 5 6", 3},
		{"stock LRU", "0 1 2", "3 4 5 6", 0},
	} {
		s := readStats(t, ctxs[i])
		if s.faults != 7 || s.evicted != want.evicted || s.resident != want.resident || s.policyEvictions != want.byPolicy {
			t.Errorf("%s: %d faults, evicted [%s] resident [%s] (%d by the policy), want 7, [%s], [%s], %d",
				want.what, s.faults, s.evicted, s.resident, s.policyEvictions, want.evicted, want.resident, want.byPolicy)
		}
	}
}

func listedWithID(st []kernelpolicy.OpsStats, ops string, id uint32) bool {
	for _, s := range st {
		if s.Ops == ops && s.ID == id {
			return true
		}
	}
	return false
}

// seqAdaptFaults models seq-adapt on one tenant's sequential scan of n
// pages from page 0: the window doubles from 1 page up to max on every
// fault that continues the stream, clipped to the 512-page VA block.
func seqAdaptFaults(n, max int) int {
	faults, window, page := 0, 0, 0
	for page < n {
		if window == 0 {
			window = 1
		} else if window *= 2; window > max {
			window = max
		}
		end := min(page+window, (page/pagesPerBlock+1)*pagesPerBlock)
		faults++
		page = end
	}
	return faults
}

// Two tenants scan 4 VA blocks each, their scans interleaved in slices of
// 48 pages; each tenant's window follows its own stream and max-pages, so
// each faults as if it ran alone, far fewer times than without prefetch.
func TestPolicyDirSeqAdaptFaults(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	deviceChunks(t, 64)
	dir, l := dirLoader(t)
	attachFromDir(t, dir, l, "seq-adapt")
	const blocks, slice = 4, 48
	type tenant struct {
		max int
		ctx string
	}
	var ts []tenant
	for _, max := range []int{64, 8} {
		cg, _ := tenantCgroupConfig(t, reg, fmt.Sprintf("seqad-%d", max),
			selectConfig(t, map[string]string{"prefetch.gpuext.io": fmt.Sprintf("seq-adapt:max-pages=%d", max)}))
		ts = append(ts, tenant{max, gpuCtx(t, fmt.Sprintf("ctx-seqad-%d", max), cg)})
	}
	for p := 0; p < blocks*pagesPerBlock; p += slice {
		for _, tn := range ts {
			n := min(slice, blocks*pagesPerBlock-p)
			replay(t, tn.ctx, fmt.Sprintf("scan %d %d %d 1", p/pagesPerBlock, p%pagesPerBlock, n))
		}
	}
	for _, tn := range ts {
		s := readStats(t, tn.ctx)
		want := uint64(seqAdaptFaults(blocks*pagesPerBlock, tn.max))
		if s.faults != want || s.policyFaults != want || s.pagesIn != blocks*pagesPerBlock {
			t.Errorf("seq-adapt max-pages=%d: faults %d (policy %d) pages_in %d, want %d by the policy and %d pages (no prefetch: %d faults)",
				tn.max, s.faults, s.policyFaults, s.pagesIn, want, blocks*pagesPerBlock, blocks*pagesPerBlock)
		}
	}
}

// A replacement that the verifier refuses leaves the attached policy in
// place, and the error shows the verifier's log with the source file and
// line; an object swapped in under the same name while a workload runs
// takes over without any eviction running without a policy.
func TestPolicyDirReplace(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	dir, l := dirLoader(t)
	attachFromDir(t, dir, l, "two-queue")
	cg, _ := tenantCgroupConfig(t, reg, "twoq-replace", selectConfig(t, map[string]string{"eviction.gpuext.io": "two-queue"}))
	ctx := gpuCtx(t, "ctx-twoq-replace", cg)
	twoQueueWorkload(t, ctx)
	expect(t, "before", evict(t, ctx), "two_queue", twoQueueDefaultOrder)

	p, _ := dir.Get("two-queue")
	if _, err := l.AttachPolicy(p, kernelpolicy.AttachOptions{}); err == nil || !strings.Contains(err.Error(), "already attached") {
		t.Errorf("attach over an attached name without replace: %v", err)
	}
	broken, err := kernelpolicy.ObjectPolicy(filepath.Join(labSDKObjects, "broken.bpf.o"), "two-queue")
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.AttachPolicy(broken, kernelpolicy.AttachOptions{Replace: true})
	t.Logf("broken replacement: %v", err)
	if !errors.Is(err, kernelpolicy.ErrVerifier) || !strings.Contains(err.Error(), "broken.bpf.c:") ||
		!strings.Contains(err.Error(), "map_value_or_null") {
		t.Errorf("broken object: %v, want the verifier's log with broken.bpf.c lines", err)
	}
	expect(t, "after the refused replacement", evict(t, ctx), "two_queue", twoQueueDefaultOrder)

	// Atomic replacement under a running workload.
	arrival, err := kernelpolicy.ObjectPolicy(filepath.Join(labSDKObjects, "arrival.bpf.o"), "two-queue")
	if err != nil {
		t.Fatal(err)
	}
	type result struct{ ops, order string }
	results := make(chan result, 4096)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := os.WriteFile(ctx+"/ctl", []byte("evict"), 0); err != nil {
				results <- result{"error: " + err.Error(), ""}
				return
			}
			data, _ := os.ReadFile(ctx + "/evict")
			var r result
			for _, line := range strings.Split(string(data), "\n") {
				k, v, _ := strings.Cut(line, " ")
				switch k {
				case "ops":
					r.ops = v
				case "order":
					r.order = v
				}
			}
			results <- r
		}
	}()
	var seen []result
	for len(seen) < 20 {
		seen = append(seen, <-results)
	}
	if _, err := l.AttachPolicy(arrival, kernelpolicy.AttachOptions{Replace: true}); err != nil {
		t.Fatalf("replace two-queue with arrival.bpf.o: %v", err)
	}
	// What the channel holds now was evicted before or during the
	// replacement (on a slow guest, all of it can be): take it, then 20
	// evictions that began after the replacement returned (bar the one
	// in flight), which must take the new object's order.
	for drained := false; !drained; {
		select {
		case r := <-results:
			seen = append(seen, r)
		default:
			drained = true
		}
	}
	after := len(seen)
	for len(seen) < after+20 {
		seen = append(seen, <-results)
	}
	close(stop)
	<-done
	close(results)
	for r := range results {
		seen = append(seen, r)
	}
	var switched bool
	for i, r := range seen {
		if r.ops != "two_queue" {
			t.Fatalf("eviction %d of %d during the replacement ran %q (order %s), want two_queue every time", i, len(seen), r.ops, r.order)
		}
		switch r.order {
		case twoQueueDefaultOrder:
			if switched {
				t.Errorf("eviction %d: the old object's order after the new one's", i)
			}
		case "1 2 3 4 5":
			switched = true
		default:
			t.Errorf("eviction %d: order %s is neither object's", i, r.order)
		}
	}
	if !switched {
		t.Errorf("no eviction after the replacement took the new object's order")
	}
	for i, r := range seen[after+1 : after+20] {
		if r.order != "1 2 3 4 5" {
			t.Errorf("eviction %d after the replacement returned: order %s, want the new object's 1 2 3 4 5", i+2, r.order)
		}
	}
	t.Logf("%d evictions during the replacement, all by ops two_queue", len(seen))
	expect(t, "after the replacement", evict(t, ctx), "two_queue", "1 2 3 4 5")
}
