package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpuext/gpuext/internal/admission"
)

// TestOCIRuncWrapperRestore: `runc restore` creates a container from a
// bundle as create does (docker start --checkpoint, containerd's shim with
// a checkpoint), so the wrapper admits it: the bundle runc restores from
// carries the agent's decision, the injection and the hooks. Here the real
// runc's restore then fails (no criu, or no checkpoint to restore), and the
// tenant the agent reserved for it is given back (runc's poststop hook as it
// destroys the container, else reconcile), as for any failed create.
func TestOCIRuncWrapperRestore(t *testing.T) {
	ociRequirePrivileged(t, "runc", "busybox", "go")
	l := ociNewLab(t)
	l.WriteConfig(t, "fail-open", map[string]any{"reconcileInterval": "2s", "reconcileGrace": "1s"})
	b := ociNewBundle(t, l, "restore", map[string]string{"policy.gpuext.io": "batch"}, nil, ociScript)
	images := filepath.Join(l.Dir, "checkpoint")
	if err := os.MkdirAll(images, 0o700); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := ociRun(60*time.Second, nil, l.Wrapper, "--config", l.Config, "--root", b.runcRoot,
		"restore", "--detach", "--image-path", images, "--work-path", images, "--bundle", b.Dir, b.ID)
	if err == nil {
		t.Fatalf("runc restore of an empty checkpoint succeeded:\n%s%s", stdout, stderr)
	}
	t.Logf("runc restore (expected to fail: nothing to restore): %v: %.300s", err, stderr)

	data, rerr := os.ReadFile(filepath.Join(b.Dir, "config.json"))
	if rerr != nil {
		t.Fatal(rerr)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	d, ok, derr := admission.DecodeDecision(spec.Annotations)
	if derr != nil || !ok {
		t.Fatalf("restore bundle has no gpuext decision (ok %v, err %v): annotations %v", ok, derr, spec.Annotations)
	}
	if d.Policy.Name != "batch" {
		t.Errorf("decision policy %q, want batch", d.Policy.Name)
	}
	preload := ""
	for _, e := range spec.Process.Env {
		if v, ok := strings.CutPrefix(e, "LD_PRELOAD="); ok {
			preload = v
		}
	}
	if !strings.Contains(preload, "libgpuext-devrt.so") {
		t.Errorf("restore bundle's LD_PRELOAD %q: no device runtime", preload)
	}
	if spec.Hooks == nil || len(spec.Hooks.CreateRuntime) == 0 || !strings.Contains(spec.Hooks.CreateRuntime[0].Path, "gpuext-oci-hook") {
		t.Errorf("restore bundle has no gpuext createRuntime hook: %+v", spec.Hooks)
	}
	if !l.LogContains(`"command":"restore"`, b.ID) {
		t.Errorf("the wrapper logged nothing for the restore of %s", b.ID)
	}

	reg := l.Registry(t)
	key := "oci/ctr/" + b.ID
	if !l.LogContains("admitted container", `"tenantKey":"`+key+`"`) {
		t.Fatalf("the agent did not admit the restored container (%s)", key)
	}
	// runc runs the poststop hook as it destroys the failed container;
	// reconcile would free the tenant had nothing run it.
	ociWait(t, 30*time.Second, "the failed restore's tenant to be given back", func() bool {
		return !ociTenantKeyLive(t, reg, key)
	})
	if entries := ociFind(t, reg, b.ID); len(entries) != 0 {
		t.Fatalf("registry entries of the failed restore: %+v", entries)
	}
}
