//go:build kernellab

package guest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/policies"
)

// examples/stride-lfu: gpu_ext's llama.cpp pair (stride prefetch, LFU list
// eviction), ported by hand, built outside the tree with the SDK and
// attached from the lab's policy directory like every example.

// strideLFUModel replays the port's prefetch rule (written again here,
// from gpu_ext's description, not from the BPF source) on touches of one
// VA block with nothing resident and no eviction, and returns the faults
// and the pages brought in.
func strideLFUModel(touches []int, pages int) (faults, pagesIn int) {
	const confidence, maxStride = 2, 128
	resident := make([]bool, pagesPerBlock)
	seen := false
	var last, stride, conf int
	for _, f := range touches {
		if resident[f] {
			continue
		}
		faults++
		first, end := f, f
		switch cur := f - last; {
		case !seen:
			seen = true
		case cur == 0:
		case cur > maxStride || cur < -maxStride:
			conf = max(conf-1, 0)
		default:
			if cur == stride {
				conf++
			} else {
				conf = max(conf-1, 0)
				stride = cur
			}
			if conf < confidence {
				break
			}
			if p := f + stride; stride > 0 && p < pagesPerBlock {
				end = min(p+pages-1, pagesPerBlock-1)
			} else if stride < 0 && p >= 0 {
				first = max(p-pages+1, 0)
			}
		}
		last = f
		for p := first; p <= end; p++ {
			if !resident[p] {
				resident[p] = true
				pagesIn++
			}
		}
	}
	return faults, pagesIn
}

func scanPages(first, n, stride int) []int {
	var ps []int
	for i := 0; i < n; i++ {
		ps = append(ps, first+i*stride)
	}
	return ps
}

// The stride prefetch on scans of one VA block: the fault counts and the
// pages brought in are the rule's (the Go model above), for strides of 1
// and 3 pages and 2 (their default) and 16 pages ahead; the confidence
// gate means a scan faults on its first pages before anything is
// prefetched, and a longer window saves more faults; a backward stride
// prefetches below the fault.
func TestStrideLFUPrefetch(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	deviceChunks(t, 64)
	dir, l := dirLoader(t)
	attachFromDir(t, dir, l, "stride-lfu")
	var last int
	for i, c := range []struct {
		stride, n, pages int
	}{{1, 512, 2}, {1, 512, 16}, {3, 170, 2}, {3, 170, 16}} {
		name := fmt.Sprintf("stridelfu-%d-%d", c.stride, c.pages)
		cg, _ := tenantCgroupConfig(t, reg, name,
			selectConfig(t, map[string]string{"prefetch.gpuext.io": fmt.Sprintf("stride-lfu:pages=%d", c.pages)}))
		ctx := gpuCtx(t, "ctx-"+name, cg)
		replay(t, ctx, fmt.Sprintf("scan 0 0 %d %d", c.n, c.stride))
		s := readStats(t, ctx)
		faults, in := strideLFUModel(scanPages(0, c.n, c.stride), c.pages)
		if int(s.faults) != faults || int(s.policyFaults) != faults || int(s.pagesIn) != in {
			t.Errorf("stride %d pages %d: faults %d (policy %d) pages_in %d, want %d by the policy and %d pages",
				c.stride, c.pages, s.faults, s.policyFaults, s.pagesIn, faults, in)
		}
		if faults >= c.n {
			t.Errorf("stride %d pages %d: the model saves no fault (%d of %d touches)", c.stride, c.pages, faults, c.n)
		}
		if i%2 == 1 && faults >= last {
			t.Errorf("stride %d: %d pages ahead fault %d times, 2 pages %d: want fewer", c.stride, c.pages, faults, last)
		}
		last = faults
	}
	// A backward stride (-2 pages from the top of the block) prefetches below the fault.
	cg, _ := tenantCgroupConfig(t, reg, "stridelfu-back", selectConfig(t, map[string]string{"prefetch.gpuext.io": "stride-lfu:pages=4"}))
	ctx := gpuCtx(t, "ctx-stridelfu-back", cg)
	touches := scanPages(pagesPerBlock-1, 128, -2)
	var lines []string
	for _, p := range touches {
		lines = append(lines, fmt.Sprintf("touch 0 %d", p))
	}
	replay(t, ctx, lines...)
	s := readStats(t, ctx)
	faults, in := strideLFUModel(touches, 4)
	if int(s.faults) != faults || int(s.pagesIn) != in || faults >= len(touches) {
		t.Errorf("stride -2 pages 4: faults %d pages_in %d, want %d and %d (fewer faults than %d touches)",
			s.faults, s.pagesIn, faults, in, len(touches))
	}
}

// The LFU list eviction against the driver's LRU on one workload: blocks
// 0..3 become resident in that order, 1 and 3 are touched again, then 4
// and 5 need room on a share of 4 chunks.  Their list: a new chunk goes to
// the head, a touched one to the tail, so 2 (the newest untouched) leaves,
// then 4, which arrived last and was never touched; 0, 1, 3 stay.  LRU
// evicts 0 then 2.
func TestStrideLFUEvictionOrder(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	deviceChunks(t, 8)
	dir, l := dirLoader(t)
	attachFromDir(t, dir, l, "stride-lfu")
	cg, _ := tenantCgroupConfig(t, reg, "stridelfu-evict", selectConfig(t, map[string]string{"eviction.gpuext.io": "stride-lfu"}))
	port := gpuCtx(t, "ctx-stridelfu-evict", cg)
	stock := gpuCtx(t, "ctx-stridelfu-stock", mustCgroup(t, reg, "stridelfu-stock", 0))
	for _, ctx := range []string{port, stock} {
		replay(t, ctx, touchBlocks(0, 1, 2, 3)...)
	}
	for _, ctx := range []string{port, stock} {
		replay(t, ctx, touchBlocks(1, 3)...)
	}
	for _, ctx := range []string{port, stock} {
		replay(t, ctx, touchBlocks(4, 5)...)
	}
	sp, ss := readStats(t, port), readStats(t, stock)
	if sp.evicted != "2 4" || sp.resident != "0 1 3 5" || sp.policyEvictions != 2 {
		t.Errorf("stride-lfu: evicted [%s] resident [%s] (%d by the policy), want [2 4], [0 1 3 5], 2", sp.evicted, sp.resident, sp.policyEvictions)
	}
	if ss.evicted != "0 2" || ss.resident != "1 3 4 5" {
		t.Errorf("stock: evicted [%s] resident [%s], want LRU's [0 2] and [1 3 4 5]", ss.evicted, ss.resident)
	}
}

// Bad selections of stride-lfu are refused with an error naming the key
// and what is wrong, through the catalog the lab's policy directory builds
// (the descriptor bounds pages to 1..512; eviction has no parameter).
func TestStrideLFUBadParams(t *testing.T) {
	cat, err := admission.Catalog(config.Config{KernelPolicyDir: labPolicyDir})
	if err != nil {
		t.Fatalf("catalog with %s: %v", labPolicyDir, err)
	}
	for _, c := range []struct {
		key, value string
		want       []string
	}{
		{"prefetch.gpuext.io", "stride-lfu:pages=0", []string{"prefetch.gpuext.io", "pages", "0"}},
		{"prefetch.gpuext.io", "stride-lfu:pages=513", []string{"prefetch.gpuext.io", "pages", "513"}},
		{"prefetch.gpuext.io", "stride-lfu:pages=two", []string{"prefetch.gpuext.io", "two"}},
		{"prefetch.gpuext.io", "stride-lfu:depth=2", []string{"prefetch.gpuext.io", "depth"}},
		{"eviction.gpuext.io", "stride-lfu:pages=2", []string{"eviction.gpuext.io", "pages"}},
	} {
		_, err := cat.Select(policies.Request{Annotations: map[string]string{c.key: c.value}})
		if err == nil {
			t.Errorf("%s=%s: selected, want a refusal", c.key, c.value)
			continue
		}
		t.Logf("%s=%s: %v", c.key, c.value, err)
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s=%s: %v, want it to name %q", c.key, c.value, err, w)
			}
		}
	}
	if _, err := cat.Select(policies.Request{Annotations: map[string]string{
		"prefetch.gpuext.io": "stride-lfu:pages=512", "eviction.gpuext.io": "stride-lfu"}}); err != nil {
		t.Errorf("stride-lfu at its bounds: %v", err)
	}
}
