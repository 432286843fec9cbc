package admission

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/lib/testutil"
	"github.com/gpuext/gpuext/policies"
)

// probeDir is a probe directory holding the example probe kernel-block-hist.
func exampleProbeDir(t *testing.T) string { return testutil.ExampleDir(t, "kernel-block-hist") }

// A container selects a probe of the config's probeDir with
// probes.gpuext.io like a built-in one; without the directory the name is
// unknown.
func TestProbeDirSelection(t *testing.T) {
	dir := exampleProbeDir(t)
	req := policies.Request{Labels: map[string]string{"probes.gpuext.io": "launch-count,kernel-block-hist"}}
	cat, err := Catalog(config.Config{ProbeDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	sel, err := cat.Select(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(sel.Policy.Probes, ","); got != "launch-count,kernel-block-hist" {
		t.Errorf("probes %s", got)
	}
	if pc := cat.Algorithms().Probes; pc == programs.Builtin() || pc.Check([]string{"kernel-block-hist"}) != nil {
		t.Errorf("the catalog's probes are not the directory's")
	}
	// what the core compiles and shows views from: the same catalog
	if pc := programCatalog(cat); pc == programs.Builtin() || pc.Check([]string{"kernel-block-hist"}) != nil {
		t.Errorf("the core's program catalog is not the directory's")
	}
	builtin, err := Catalog(config.Default())
	if err != nil {
		t.Fatal(err)
	}
	if programCatalog(builtin) != programs.Builtin() {
		t.Errorf("without probeDir the core's program catalog is not the built-in one")
	}
	if _, err := builtin.Select(req); !errors.Is(err, policies.ErrBadValue) || !strings.Contains(err.Error(), `unknown probe "kernel-block-hist"`) {
		t.Errorf("without probeDir: err = %v, want the probe unknown", err)
	}
}

// A bad entry in the probe directory fails the catalog (and with it the
// agent's start), naming the file; a relative probeDir is refused when
// the config is read.
func TestProbeDirBadEntry(t *testing.T) {
	dir := exampleProbeDir(t)
	if err := os.WriteFile(filepath.Join(dir, "broken.json"), []byte(`{"name": "broken", "programs": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Catalog(config.Config{ProbeDir: dir})
	if !errors.Is(err, programs.ErrBadProbeDir) || !strings.Contains(err.Error(), "probeDir: "+filepath.Join(dir, "broken.json")+": ") {
		t.Errorf("err = %v, want the broken descriptor named", err)
	}
	if _, err := config.Parse([]byte(`{"probeDir": "probes"}`), "c.json"); err == nil || !strings.Contains(err.Error(), `probeDir "probes": must be an absolute path`) {
		t.Errorf("relative probeDir: %v", err)
	}
}

// restrictedProbes: a probe (here the directory's) that only a rule's
// namespace may select; elsewhere the request is forbidden, naming the key.
func TestProbeConstraints(t *testing.T) {
	cat, err := Catalog(config.Config{ProbeDir: exampleProbeDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := policies.ParseConstraints([]byte(`{"restrictedProbes": ["kernel-block-hist"],
		"rules": [{"namespaces": ["perf"], "allowProbes": ["kernel-block-hist"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ns, probes string
		forbidden  bool
	}{{"perf", "kernel-block-hist", false}, {"web", "kernel-block-hist", true}, {"web", "launch-count", false}} {
		req := policies.Request{PodNamespace: tc.ns, PodAnnotations: map[string]string{"probes.gpuext.io/pod": tc.probes}}
		sel, err := cat.Select(req)
		if err != nil {
			t.Fatal(err)
		}
		err = cons.Check(req, sel)
		if !tc.forbidden {
			if err != nil {
				t.Errorf("%s in %s: %v", tc.probes, tc.ns, err)
			}
			continue
		}
		var ke *policies.KeyError
		if !errors.Is(err, policies.ErrForbidden) || !errors.As(err, &ke) || ke.Key != "probes.gpuext.io/pod" ||
			!strings.Contains(err.Error(), `device probe "kernel-block-hist" is restricted`) {
			t.Errorf("%s in %s: err = %v, want forbidden naming probes.gpuext.io/pod", tc.probes, tc.ns, err)
		}
	}
	if _, err := policies.ParseConstraints([]byte(`{"rules": [{"allowProbes": ["Bad_Name"]}]}`)); err == nil ||
		!strings.Contains(err.Error(), "rules[0].allowProbes[0]") {
		t.Errorf("bad probe name in a rule: %v", err)
	}
}
