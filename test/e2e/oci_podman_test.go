package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/lib/testutil"
)

// ociPodman drives test/lab/podman.sh with private storage.
type ociPodman struct {
	env    []string
	script string
}

func ociNewPodman(t *testing.T, l *ociLab, extraEnv ...string) *ociPodman {
	t.Helper()
	p := &ociPodman{
		script: filepath.Join(testutil.RepoRoot(), "test", "lab", "podman.sh"),
		env:    append([]string{"GPUEXT_LAB_DIR=" + filepath.Join(l.Dir, "lab")}, extraEnv...),
	}
	t.Cleanup(func() {
		if _, stderr, err := ociRun(90*time.Second, p.env, p.script, "clean"); err != nil {
			t.Errorf("podman.sh clean: %v\n%s", err, stderr)
		}
	})
	if _, stderr, err := ociRun(90*time.Second, p.env, p.script, "import"); err != nil {
		t.Fatalf("podman.sh import: %v\n%s", err, stderr)
	}
	return p
}

func (p *ociPodman) podman(args ...string) (string, string, error) {
	return ociRun(60*time.Second, p.env, p.script, args...)
}

// ociRenderHooks renders deploy/podman's hooks.d files, as an admin would.
func ociRenderHooks(t *testing.T, l *ociLab) string {
	t.Helper()
	dir := filepath.Join(l.Dir, "hooks.d")
	render := filepath.Join(testutil.RepoRoot(), "deploy", "podman", "render.sh")
	if out, err := exec.Command(render, l.Hook, l.Config, dir).CombinedOutput(); err != nil {
		t.Fatalf("render.sh: %v\n%s", err, out)
	}
	return dir
}

// TestOCIPodmanHooksDir: podman with the hooks.d files registers the
// container's real cgroup while it runs and removes it with the container.
// Hooks cannot change env, so there is no injection on this path (see
// docs/oci-hook.md; TestOCIPodmanRuntime covers injection).
func TestOCIPodmanHooksDir(t *testing.T) {
	ociRequirePrivileged(t, "podman", "conmon", "runc", "busybox", "go")
	l := ociNewLab(t)
	p := ociNewPodman(t, l, "GPUEXT_HOOKS_DIR="+ociRenderHooks(t, l))
	reg := l.Registry(t)

	out, stderr, err := p.podman("run", "-d", "--network", "none", "--annotation", "policy.gpuext.io=batch",
		ociImage, "/bin/sh", "-c", ociScript)
	if err != nil {
		t.Fatalf("podman run: %v\n%s", err, stderr)
	}
	id := strings.TrimSpace(out)
	var logs string
	ociWait(t, 20*time.Second, "container output", func() bool {
		logs, _, _ = p.podman("logs", id)
		return strings.Contains(logs, "READY")
	})
	ociAssertRegistered(t, reg, id, "/libpod_parent/libpod-"+id, "batch")
	if _, ok := ociEnvValue(logs, "GPUEXT_TENANT_ID"); ok {
		t.Errorf("hooks-only podman container has gpuext env:\n%s", logs)
	}
	if _, stderr, err := p.podman("rm", "-f", "-t", "0", id); err != nil {
		t.Fatalf("podman rm -f: %v\n%s", err, stderr)
	}
	ociWait(t, 20*time.Second, "registry entry removal", func() bool { return len(ociFind(t, reg, id)) == 0 })
	if ociTenantKeyLive(t, reg, "oci/ctr/"+id) {
		t.Fatal("tenant still reserved after podman rm")
	}

	// Strict: the createRuntime hook fails, runc refuses the container.
	l.WriteConfig(t, "strict", nil)
	_, stderr, err = p.podman("run", "--rm", "--network", "none", "--annotation", "policy.gpuext.io=nope",
		ociImage, "/bin/sh", "-c", "env")
	if err == nil || !strings.Contains(stderr, `policy.gpuext.io="nope"`) {
		t.Fatalf("strict podman run: err %v, stderr %q; want a failure naming the key", err, stderr)
	}
	t.Logf("podman said: %s", strings.TrimSpace(stderr))
	if !l.LogContains(`policy.gpuext.io=\"nope\"`, "strict") {
		t.Fatal("strict: no log line naming the key")
	}
}

// TestOCIPodmanRuntime: podman with gpuext-runc as its OCI runtime gets the
// full injection, like Docker. Its config comes in through podman's
// --runtime-flag (podman passes each as a global runtime flag).
func TestOCIPodmanRuntime(t *testing.T) {
	ociRequirePrivileged(t, "podman", "conmon", "runc", "busybox", "go")
	l := ociNewLab(t)
	p := ociNewPodman(t, l, "GPUEXT_LAB_PODMAN_RUNTIME="+l.Wrapper)
	reg := l.Registry(t)

	out, stderr, err := p.podman("--runtime-flag", "gpuext-config="+l.Config, "run", "-d", "--network", "none",
		"--annotation", "policy.gpuext.io=batch", "--env", "LD_PRELOAD=/lib/own.so", ociImage, "/bin/sh", "-c", ociScript)
	if err != nil {
		t.Fatalf("podman run: %v\n%s", err, stderr)
	}
	id := strings.TrimSpace(out)
	var logs string
	ociWait(t, 20*time.Second, "container output", func() bool {
		logs, _, _ = p.podman("logs", id)
		return strings.Contains(logs, "READY")
	})
	e := ociAssertRegistered(t, reg, id, "/libpod_parent/libpod-"+id, "batch")
	for k, want := range map[string]string{
		"LD_PRELOAD":       "/lib/own.so:/run/gpuext/devrt/libgpuext-devrt.so",
		"GPUEXT_TENANT_ID": strconv.FormatUint(uint64(e.Tenant.ID), 10),
		"GPUEXT_POLICY":    "batch",
	} {
		if got, _ := ociEnvValue(logs, k); got != want {
			t.Errorf("container env %s=%q, want %q", k, got, want)
		}
	}
	if !strings.Contains(logs[strings.Index(logs, "DEVRT:"):], "libgpuext-devrt.so") ||
		!strings.Contains(logs[strings.Index(logs, "RO:"):], "Read-only file system") {
		t.Errorf("mounts in the container:\n%s", logs)
	}
	if _, stderr, err := p.podman("--runtime-flag", "gpuext-config="+l.Config, "rm", "-f", "-t", "0", id); err != nil {
		t.Fatalf("podman rm -f: %v\n%s", err, stderr)
	}
	ociWait(t, 20*time.Second, "registry entry removal", func() bool { return len(ociFind(t, reg, id)) == 0 })
	if ents, _ := os.ReadDir(filepath.Join(l.StateDir, "tenants")); len(ents) != 0 {
		t.Errorf("tenant dirs left: %v", ents)
	}
}
