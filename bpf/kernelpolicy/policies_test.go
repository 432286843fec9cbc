package kernelpolicy

import (
	"strings"
	"testing"

	"github.com/gpuext/gpuext/policies"
)

// Every attachable policy carries the name a policy file uses for it
// (policies.EvictionAlgorithms or policies.PrefetchAlgorithms), and its
// program object parses with the struct_ops map the catalog names.
func TestCatalogNamesMatchPolicyModel(t *testing.T) {
	known := map[string]bool{}
	for _, specs := range [][]policies.AlgorithmSpec{policies.EvictionAlgorithms, policies.PrefetchAlgorithms} {
		for _, s := range specs {
			known[s.Name] = true
		}
	}
	names := Names()
	// what the kernel lab and a policy file attach by name: a catalog
	// without them (or empty) would pass the loop below checking nothing
	for _, want := range []string{"fifo", "lru", "lfu", "mru", "freq-decay", "tree-threshold", "sched_priority"} {
		if _, ok := catalog[want]; !ok {
			t.Errorf("catalog lacks %q (has %v)", want, names)
		}
	}
	for _, name := range names {
		// Scheduling policies are chosen by the tenant's priority class,
		// which the model validates, not by a name in the policies.
		if !known[name] && !strings.HasPrefix(name, "sched_") {
			t.Errorf("catalog policy %q is not an eviction or prefetch algorithm of the policy model", name)
		}
		e := catalog[name]
		spec, err := e.load()
		if err != nil {
			t.Errorf("%s: parse object: %v", name, err)
			continue
		}
		if _, ok := spec.Maps[e.opsMap]; !ok {
			t.Errorf("%s: no struct_ops map %q in its object", name, e.opsMap)
		}
	}
}
