package policies

import (
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/gpuext/gpuext/gpubpf/programs/catalog"
)

// probeSet is a ProbeSet as admission gives one: the program catalog with
// the host's probe directory (here, its names).
type probeSet []string

func (s probeSet) Check(names []string) error { return catalog.Check(s, names) }

// The device probes a policy file and probes.gpuext.io may name are the
// set the catalog was given; without one, the probes gpuext ships.
func TestProbeSetDecides(t *testing.T) {
	fsys := fstest.MapFS{"catalog/hist.json": {Data: []byte(`{"name": "hist", "memory": {"eviction": {"name": "lru"}, "prefetch": {"name": "tree-threshold"}},
		"priority": {"class": "standard"}, "probes": ["kernel-block-hist"]}`)}}
	if _, err := LoadCatalog(fsys, "catalog"); err == nil || !strings.Contains(err.Error(), `unknown probe "kernel-block-hist" (known: launch-count, launch-latency, launch-stats, sm-histogram)`) {
		t.Fatalf("a probe-directory probe without the directory: %v, want unknown probe and the built-in names", err)
	}
	set := probeSet{"kernel-block-hist", "launch-stats"}
	user, err := LoadCatalogWith(fsys, "catalog", Algorithms{Probes: set})
	if err != nil {
		t.Fatalf("with a set that holds it: %v", err)
	}
	if p, _ := user.Get("hist"); !slices.Equal(p.Probes, []string{"kernel-block-hist"}) {
		t.Fatalf("policy hist selects %q", p.Probes)
	}

	cat := BuiltinCatalog().WithAlgorithms(Algorithms{Probes: set})
	sel, err := cat.Select(Request{Labels: map[string]string{"probes.gpuext.io": "kernel-block-hist,launch-stats"}})
	if err != nil || !slices.Equal(sel.Policy.Probes, []string{"kernel-block-hist", "launch-stats"}) {
		t.Fatalf("probes.gpuext.io over the given set: %q, %v", sel.Policy.Probes, err)
	}
	// a built-in probe the set does not hold is refused: the set decides
	if _, err := cat.Select(Request{Labels: map[string]string{"probes.gpuext.io": "sm-histogram"}}); err == nil ||
		!strings.Contains(err.Error(), `unknown probe "sm-histogram" (known: kernel-block-hist, launch-stats)`) {
		t.Fatalf("a probe outside the set: %v", err)
	}
	if _, err := BuiltinCatalog().Select(Request{Labels: map[string]string{"probes.gpuext.io": "sm-histogram"}}); err != nil {
		t.Fatalf("a built-in probe with no set given: %v", err)
	}
}
