package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/internal/admission"
)

// The fail-mode table: every runtime path, in each fail mode, does the same
// thing with a container for each kind of error. The kinds are made real:
// a request naming no policy, a request the admin constraints forbid, and
// an internal error (the registry is full: every tenant id is taken).
var failKinds = []struct {
	kind admission.ErrorKind
	ann  map[string]string
	full bool // fill the registry first
}{
	{admission.KindRequest, map[string]string{"policy.gpuext.io": "nope"}, false},
	{admission.KindConstraint, map[string]string{"policy.gpuext.io": "latency-critical"}, false},
	{admission.KindInternal, map[string]string{"policy.gpuext.io": "batch"}, true},
}

// wantOutcome is the one rule: fail-open runs the container (the default
// policy for a bad request, no gpuext for an internal error); strict
// refuses it.
func wantOutcome(mode string, kind admission.ErrorKind) admission.Outcome {
	switch {
	case mode == "strict":
		return admission.OutcomeRefused
	case kind == admission.KindInternal:
		return admission.OutcomeWithout
	}
	return admission.OutcomeDefault
}

// observed classifies what a path did: refused (creation failed), without
// gpuext (ran, no registry entry), or under which policy it ran.
func observed(t *testing.T, reg *bpf.Registry, id string, runErr error) admission.Outcome {
	t.Helper()
	if runErr != nil {
		return admission.OutcomeRefused
	}
	entries := ociFind(t, reg, id)
	switch {
	case len(entries) == 0:
		return admission.OutcomeWithout
	case entries[0].Tenant.Policy == "default":
		return admission.OutcomeDefault
	}
	return admission.Outcome("policy " + entries[0].Tenant.Policy)
}

// fillRegistry takes every free tenant id, as a host at its limit; the
// returned func gives them back.
func fillRegistry(t *testing.T, reg *bpf.Registry) func() {
	t.Helper()
	var ids []bpf.TenantID
	for i := 0; ; i++ {
		id, err := reg.Reserve(fmt.Sprintf("fill/%d", i), "default", bpf.GpuextTenantConfig{PriorityClass: uint32(bpf.PriorityStandard)})
		if errors.Is(err, bpf.ErrRegistryFull) {
			break
		}
		if err != nil {
			t.Fatalf("fill registry: %v", err)
		}
		ids = append(ids, id)
	}
	return func() {
		for _, id := range ids {
			if err := reg.ReleaseTenant(id); err != nil {
				t.Errorf("release filler %d: %v", id, err)
			}
		}
	}
}

func failModeConstraints(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "constraints.json")
	if err := os.WriteFile(path, []byte(`{"restrictedClasses": ["latency-critical"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestFailModeTable runs the table on the four paths: containerd NRI, runc
// through gpuext-runc (wrapper + hook), runc with the hook added by hand,
// and podman with the hooks.d files.
func TestFailModeTable(t *testing.T) {
	ociRequirePrivileged(t, "runc", "podman", "conmon", "busybox", "go")
	type row struct{ path, mode, kind, want, got string }
	var rows []row
	check := func(t *testing.T, path, mode string, kind admission.ErrorKind, got admission.Outcome, detail string) {
		t.Helper()
		want := wantOutcome(mode, kind)
		rows = append(rows, row{path, mode, string(kind), string(want), string(got)})
		if got != want {
			t.Errorf("%s, %s, %s error: %s, want %s (%s)", path, mode, kind, got, want, detail)
		}
	}
	for _, mode := range []string{"fail-open", "strict"} {
		t.Run("nri/"+mode, func(t *testing.T) {
			work := t.TempDir()
			l := startCtdLab(t, mode, map[string]string{"constraintsFile": failModeConstraints(t, work)})
			reg := l.registry(t)
			pod := l.runPod(t, "failmode", nil)
			for i, k := range failKinds {
				var release func()
				if k.full {
					release = fillRegistry(t, reg)
				}
				name := fmt.Sprintf("c%d", i)
				id, err := pod.create(t, name, k.ann, nil, nil)
				if err == nil {
					_, err = l.CrictlErr("start", id)
				}
				check(t, "nri", mode, k.kind, observed(t, reg, id, err), fmt.Sprint(err))
				if release != nil {
					release()
				}
			}
		})
		t.Run("oci/"+mode, func(t *testing.T) {
			l := ociNewLab(t)
			l.WriteConfig(t, mode, map[string]any{"constraintsFile": failModeConstraints(t, l.Dir)})
			reg := l.Registry(t)
			p := ociNewPodman(t, l, "GPUEXT_HOOKS_DIR="+ociRenderHooks(t, l))
			for i, k := range failKinds {
				var release func()
				if k.full {
					release = fillRegistry(t, reg)
				}
				// runc through the wrapper (which adds the hooks)
				b := ociNewBundle(t, l, fmt.Sprintf("w%d", i), k.ann, nil, "echo READY; sleep 30")
				stderr, err := b.runDetached(t, l.Wrapper, "--config", l.Config)
				check(t, "runc-wrapper", mode, k.kind, observed(t, reg, b.ID, err), stderr)
				// runc with the hook entries added by hand
				h := ociNewBundle(t, l, fmt.Sprintf("h%d", i), k.ann, nil, "echo READY; sleep 30")
				h.addHooks(t, l)
				stderr, err = h.runDetached(t, "runc")
				check(t, "runc-hook", mode, k.kind, observed(t, reg, h.ID, err), stderr)
				// podman, hooks.d
				args := []string{"run", "-d", "--network", "none"}
				for k, v := range k.ann {
					args = append(args, "--annotation", k+"="+v)
				}
				out, stderr, err := p.podman(append(args, ociImage, "/bin/sh", "-c", "sleep 30")...)
				id := strings.TrimSpace(out)
				check(t, "podman-hooks.d", mode, k.kind, observed(t, reg, id, err), stderr)
				if id != "" {
					p.podman("rm", "-f", "-t", "0", id) //nolint:errcheck
				}
				if release != nil {
					release()
				}
			}
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-16s %-10s %-11s %-16s %s\n", "path", "failMode", "error", "want", "got")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-16s %-10s %-11s %-16s %s\n", r.path, r.mode, r.kind, r.want, r.got)
	}
	t.Logf("fail-mode table (%d cases):\n%s", len(rows), b.String())
	if len(rows) != 2*len(failKinds)*4 {
		t.Fatalf("%d cases ran, want %d", len(rows), 2*len(failKinds)*4)
	}
}
