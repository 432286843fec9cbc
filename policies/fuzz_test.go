package policies

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// parseKV reads "k=v" lines (the fuzz corpus format of one metadata map).
func parseKV(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}

// FuzzSelect checks the invariants of selection on arbitrary metadata: no
// panic; either a policy of the catalog that validates, or a *KeyError whose
// key the input holds (a missing parameter names a grammar key instead).
// The admin constraints keep the same contract.
func FuzzSelect(f *testing.F) {
	f.Add("web", "prod", "policy.gpuext.io=batch", "", "", "")
	f.Add("web", "", "", "policy.gpuext.io=quota\nquota.gpuext.io=8GiB", "", "")
	f.Add("db", "ml-a", "", "", "policy.gpuext.io/container.db=latency-critical\npriority.gpuext.io/pod=best-effort", "team=search")
	f.Add("x", "dev", "eviction.gpuext.io=lfu:decay=20\nprefetch.gpuext.io=stride:stride=4", "", "", "polcy.gpuext.io=batch")
	f.Add("web", "", "p\u043elicy.gpuext.io=batch", "policy.gpuext.io.=batch", "policy.gpuext.io\u200b/pod=batch", "")
	f.Add("web", "", "policy.gpuext.io/container.w\u0435b=batch", "", "\uff50olicy.gpuext.io=quota", "")
	cat := BuiltinCatalog()
	cons, err := LoadConstraints("examples/constraints.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, ctr, ns, ann, labels, podAnn, podLabels string) {
		req := Request{ContainerName: ctr, PodNamespace: ns, Annotations: parseKV(ann), Labels: parseKV(labels),
			PodAnnotations: parseKV(podAnn), PodLabels: parseKV(podLabels)}
		inInput := func(key string) bool {
			for _, m := range []map[string]string{req.Annotations, req.Labels, req.PodAnnotations, req.PodLabels} {
				if _, ok := m[key]; ok {
					return true
				}
			}
			return false
		}
		checkErr := func(err error, sentinel error) {
			var ke *KeyError
			if !errors.As(err, &ke) {
				t.Fatalf("error is not a *KeyError: %v", err)
			}
			if !inInput(ke.Key) && !(errors.Is(err, ErrMissingParam) && slices.Contains(Keys, ke.Key)) &&
				!(ke.Key == KeyPolicy && sentinel == ErrForbidden) {
				t.Fatalf("error names key %q that is not in the input: %v", ke.Key, err)
			}
			if !strings.Contains(err.Error(), keyText(ke.Key)) { // long or non-ASCII keys quoted, cut at MaxQuoted
				t.Fatalf("error text does not name key %q: %v", ke.Key, err)
			}
			if len(err.Error()) > 8<<10 {
				t.Fatalf("error text is %d bytes: %.200s", len(err.Error()), err)
			}
			if sentinel != nil && !errors.Is(err, sentinel) {
				t.Fatalf("error does not wrap %v: %v", sentinel, err)
			}
		}
		sel, err := cat.Select(req)
		if err != nil {
			checkErr(err, nil)
			return
		}
		if err := sel.Policy.Validate(); err != nil {
			t.Fatalf("selected policy does not validate: %v", err)
		}
		if _, ok := cat.Get(sel.Policy.Name); !ok || (sel.Tenant != TenantContainer && sel.Tenant != TenantPod) {
			t.Fatalf("bad selection %+v", sel)
		}
		for base, key := range sel.Sources {
			if !inInput(key) || !strings.HasPrefix(key, base) {
				t.Fatalf("source %s=%q is not a key of the input", base, key)
			}
		}
		if err := cons.Check(req, sel); err != nil {
			checkErr(err, ErrForbidden)
		}
	})
}
