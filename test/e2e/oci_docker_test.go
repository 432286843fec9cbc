package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/lib/testutil"
)

// ociDockerd is a private dockerd started by test/lab/dockerd.sh with the
// gpuext-runc wrapper registered as runtime "gpuext".
type ociDockerd struct {
	env      []string
	script   string
	DataRoot string
}

func ociStartDockerd(t *testing.T, l *ociLab) *ociDockerd {
	t.Helper()
	labDir := filepath.Join(l.Dir, "lab")
	d := &ociDockerd{
		script:   filepath.Join(testutil.RepoRoot(), "test", "lab", "dockerd.sh"),
		DataRoot: filepath.Join(labDir, "docker", "data"),
		// dockerd passes its environment down to containerd, the shim and
		// the runtime: GPUEXT_CONFIG reaches gpuext-runc (daemon.json
		// runtimeArgs ["--config", FILE] is the production way, see
		// docs/oci-hook.md; the lab script registers a bare path).
		env: []string{"GPUEXT_LAB_DIR=" + labDir, "GPUEXT_RUNC_WRAPPER=" + l.Wrapper, "GPUEXT_CONFIG=" + l.Config},
	}
	l.WriteConfig(t, "fail-open", map[string]any{"dockerDataRoot": d.DataRoot})
	t.Cleanup(func() {
		start := time.Now()
		if _, stderr, err := ociRun(90*time.Second, d.env, d.script, "clean"); err != nil {
			t.Errorf("dockerd.sh clean: %v\n%s", err, stderr)
		}
		t.Logf("dockerd.sh clean: %s", time.Since(start).Round(time.Millisecond))
	})
	start := time.Now()
	if _, stderr, err := ociRun(90*time.Second, d.env, d.script, "up"); err != nil {
		t.Fatalf("dockerd.sh up: %v\n%s", err, stderr)
	}
	t.Logf("dockerd.sh up: %s", time.Since(start).Round(time.Millisecond))
	return d
}

// docker runs /usr/bin/docker against the private daemon.
func (d *ociDockerd) docker(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	start := time.Now()
	out, stderr, err := ociRun(60*time.Second, d.env, d.script, append([]string{"docker"}, args...)...)
	if dur := time.Since(start); dur > 5*time.Second {
		t.Logf("slow: docker %s: %s", args[0], dur.Round(time.Millisecond))
	}
	return out, stderr, err
}

const ociImage = "localhost/gpuext-busybox:lab"

// TestOCIDocker: dockerd with runtime gpuext (the wrapper). A container
// labelled policy.gpuext.io=batch sees the device runtime (env, read-only
// mounts); while it runs the registry holds its real cgroup id; after
// `docker rm -f` it is gone. A bad label starts with the default policy in
// fail-open mode (the log names the key) and is refused in strict mode.
func TestOCIDocker(t *testing.T) {
	ociRequirePrivileged(t, "dockerd", "/usr/bin/docker", "runc", "busybox", "go")
	l := ociNewLab(t)
	d := ociStartDockerd(t, l)
	reg := l.Registry(t)

	out, stderr, err := d.docker(t, "run", "-d", "--runtime", "gpuext", "--network", "none",
		"--label", "policy.gpuext.io=batch", "--name", "gx-batch", "--env", "LD_PRELOAD=/lib/own.so",
		ociImage, "/bin/sh", "-c", ociScript)
	if err != nil {
		t.Fatalf("docker run: %v\n%s", err, stderr)
	}
	id := strings.TrimSpace(out)
	var logs string
	ociWait(t, 20*time.Second, "container output", func() bool {
		logs, _, _ = d.docker(t, "logs", id)
		return strings.Contains(logs, "READY")
	})
	e := ociAssertRegistered(t, reg, id, "/docker/"+id, "batch")
	if e.Cgroup.ContainerName != "gx-batch" {
		t.Errorf("registered name %q, want the docker name gx-batch", e.Cgroup.ContainerName)
	}
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
		!strings.Contains(logs, `"policy": "batch"`) || !strings.Contains(logs[strings.Index(logs, "RO:"):], "Read-only file system") {
		t.Errorf("mounts in the container:\n%s", logs)
	}
	if _, stderr, err := d.docker(t, "rm", "-f", id); err != nil {
		t.Fatalf("docker rm -f: %v\n%s", err, stderr)
	}
	ociWait(t, 20*time.Second, "registry entry removal", func() bool { return len(ociFind(t, reg, id)) == 0 })
	if ociTenantKeyLive(t, reg, "oci/ctr/"+id) {
		t.Fatal("tenant still reserved after docker rm -f")
	}

	// Fail-open: a bad label runs with the default policy; the log names the key.
	out, stderr, err = d.docker(t, "run", "--rm", "--runtime", "gpuext", "--network", "none",
		"--label", "policy.gpuext.io=nope", ociImage, "/bin/sh", "-c", "env")
	if err != nil {
		t.Fatalf("docker run (fail-open, bad label): %v\n%s", err, stderr)
	}
	if pol, _ := ociEnvValue(out, "GPUEXT_POLICY"); pol == "" || pol == "nope" {
		t.Fatalf("fail-open policy %q, want the default\n%s", pol, out)
	}
	if !l.LogContains(`policy.gpuext.io=\"nope\"`, "default policy") {
		t.Fatal("no log line naming the key")
	}

	// Strict: docker run fails with the keyed message.
	l.WriteConfig(t, "strict", nil)
	_, stderr, err = d.docker(t, "run", "--rm", "--runtime", "gpuext", "--network", "none",
		"--label", "policy.gpuext.io=nope", ociImage, "/bin/sh", "-c", "env")
	if err == nil || !strings.Contains(stderr, `policy.gpuext.io="nope"`) {
		t.Fatalf("strict docker run: err %v, stderr %q; want a failure naming the key", err, stderr)
	}
	t.Logf("docker said: %s", strings.TrimSpace(stderr))
	if ents, _ := os.ReadDir(filepath.Join(l.StateDir, "tenants")); len(ents) != 0 {
		t.Errorf("tenant dirs left: %v", ents)
	}
}
