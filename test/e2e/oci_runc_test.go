package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ociBundle is a runc bundle with a busybox rootfs.
type ociBundle struct {
	Dir, ID, CgroupsPath, Out string
	runcRoot                  string
	cgroupParent              string
}

// ociNewBundle writes a bundle: `runc spec` as a user would start, then a
// busybox rootfs, no terminal, the annotations and a private cgroup.
func ociNewBundle(t *testing.T, l *ociLab, name string, ann map[string]string, env []string, script string) *ociBundle {
	t.Helper()
	b := &ociBundle{
		Dir: filepath.Join(l.Dir, "bundle-"+name), ID: "gx-oci-" + name + "-" + ociRandom(3),
		runcRoot: filepath.Join(l.Dir, "runc"), cgroupParent: "gpuext-e2e-oci-" + ociRandom(3),
	}
	b.CgroupsPath = "/" + b.cgroupParent + "/" + b.ID
	b.Out = filepath.Join(l.Dir, name+".out")
	rootfs := filepath.Join(b.Dir, "rootfs")
	for _, d := range []string{"bin", "proc", "sys", "dev", "tmp", "run"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin", "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, applet := range []string{"sh", "env", "ls", "cat", "sleep", "grep"} {
		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("runc", "spec", "--bundle", b.Dir).CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v\n%s", err, out)
	}
	b.edit(t, func(s *specs.Spec) {
		s.Root.Path = rootfs
		s.Root.Readonly = false
		s.Process.Terminal = false
		s.Process.Args = []string{"/bin/sh", "-c", script}
		s.Process.Env = append(s.Process.Env, env...)
		s.Annotations = ann
		s.Linux.CgroupsPath = b.CgroupsPath
	})
	t.Cleanup(func() {
		// runc removes the container's cgroups at delete; the parent is ours.
		exec.Command("runc", "--root", b.runcRoot, "delete", "--force", b.ID).Run() //nolint:errcheck
		for _, root := range ociCgroupRoots() {
			os.Remove(filepath.Join(root, b.cgroupParent, b.ID))
			os.Remove(filepath.Join(root, b.cgroupParent))
		}
	})
	return b
}

// ociCgroupRoots lists the mounted cgroup hierarchies.
func ociCgroupRoots() []string {
	data, _ := os.ReadFile("/proc/self/mounts")
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && (f[2] == "cgroup" || f[2] == "cgroup2") {
			out = append(out, f[1])
		}
	}
	return out
}

func (b *ociBundle) edit(t *testing.T, fn func(*specs.Spec)) {
	t.Helper()
	path := filepath.Join(b.Dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	fn(&s)
	data, _ = json.MarshalIndent(&s, "", "  ")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// addHooks adds the gpuext hook by hand, as docs/oci-hook.md tells a runc user.
func (b *ociBundle) addHooks(t *testing.T, l *ociLab) {
	b.edit(t, func(s *specs.Spec) {
		if s.Hooks == nil {
			s.Hooks = &specs.Hooks{}
		}
		hook := func(stage string) specs.Hook {
			return specs.Hook{Path: l.Hook, Args: []string{"gpuext-oci-hook", "--config", l.Config, stage}}
		}
		s.Hooks.CreateRuntime = append(s.Hooks.CreateRuntime, hook("createRuntime"))
		s.Hooks.Poststop = append(s.Hooks.Poststop, hook("poststop"))
	})
}

// runDetached starts the container with `<runtime> run -d`; its stdout and
// stderr go to b.Out.
func (b *ociBundle) runDetached(t *testing.T, runtime string, globals ...string) (stderr string, err error) {
	t.Helper()
	out, ferr := os.Create(b.Out)
	if ferr != nil {
		t.Fatal(ferr)
	}
	defer out.Close()
	args := append(append(globals, "--root", b.runcRoot), "run", "-d", "--bundle", b.Dir, b.ID)
	// Files, not pipes: the detached container keeps its stdio open.
	errPath := b.Out + ".stderr"
	errf, ferr := os.Create(errPath)
	if ferr != nil {
		t.Fatal(ferr)
	}
	defer errf.Close()
	cmd := exec.Command(runtime, args...)
	cmd.Stdout, cmd.Stderr = out, errf
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill() //nolint:errcheck
		t.Fatalf("%s run did not return", runtime)
	}
	data, _ := os.ReadFile(errPath)
	return string(data), err
}

// stop kills and deletes the container (poststop runs at delete).
func (b *ociBundle) stop(t *testing.T) {
	t.Helper()
	exec.Command("runc", "--root", b.runcRoot, "kill", b.ID, "KILL").Run() //nolint:errcheck
	ociWait(t, 10*time.Second, "container to stop", func() bool {
		out, _ := exec.Command("runc", "--root", b.runcRoot, "state", b.ID).Output()
		return strings.Contains(string(out), `"status": "stopped"`)
	})
	if out, err := exec.Command("runc", "--root", b.runcRoot, "delete", b.ID).CombinedOutput(); err != nil {
		t.Fatalf("runc delete: %v\n%s", err, out)
	}
}

func (b *ociBundle) output(t *testing.T, marker string) string {
	t.Helper()
	var s string
	ociWait(t, 10*time.Second, "container output "+marker, func() bool {
		data, _ := os.ReadFile(b.Out)
		s = string(data)
		return strings.Contains(s, marker)
	})
	return s
}

const ociScript = `env; echo DEVRT:; ls /run/gpuext/devrt 2>&1; echo TENANT:; cat /run/gpuext/tenant/config.json 2>&1; echo RO:; touch /run/gpuext/devrt/x 2>&1; echo READY; sleep 30`

// TestOCIRuncHook: plain runc with the hook entries added by hand. The
// registry holds the container's real cgroup id while it runs and nothing
// after poststop. Without the wrapper there is no injection (a hook cannot
// change env), which the test shows too.
func TestOCIRuncHook(t *testing.T) {
	ociRequirePrivileged(t, "runc", "busybox", "go")
	l := ociNewLab(t)
	b := ociNewBundle(t, l, "hook", map[string]string{"policy.gpuext.io": "batch"}, nil, ociScript)
	b.addHooks(t, l)
	if stderr, err := b.runDetached(t, "runc"); err != nil {
		t.Fatalf("runc run: %v\n%s", err, stderr)
	}
	out := b.output(t, "READY")
	reg := l.Registry(t)
	e := ociAssertRegistered(t, reg, b.ID, b.CgroupsPath, "batch")
	if e.Cgroup.CgroupPath != b.CgroupsPath {
		t.Errorf("registered cgroup path %q, want %q", e.Cgroup.CgroupPath, b.CgroupsPath)
	}
	if _, ok := ociEnvValue(out, "GPUEXT_TENANT_ID"); ok {
		t.Errorf("hook-only container has gpuext env:\n%s", out)
	}
	b.stop(t)
	if entries := ociFind(t, reg, b.ID); len(entries) != 0 {
		t.Fatalf("after poststop: %+v", entries)
	}
	if ociTenantKeyLive(t, reg, "oci/ctr/"+b.ID) {
		t.Fatal("tenant still reserved after poststop")
	}
	if !l.LogContains(`"stage":"createRuntime"`, b.ID, "registered tenant cgroup") ||
		!l.LogContains(`"stage":"poststop"`, b.ID, "removed tenant cgroup") {
		t.Fatal("hook log lines missing")
	}
}

// TestOCIRuncWrapper: the same container through gpuext-runc, which adds
// the injection (env with LD_PRELOAD appended, read-only mounts) and the
// hooks itself.
func TestOCIRuncWrapper(t *testing.T) {
	ociRequirePrivileged(t, "runc", "busybox", "go")
	l := ociNewLab(t)
	b := ociNewBundle(t, l, "wrap", map[string]string{"policy.gpuext.io": "batch"}, []string{"LD_PRELOAD=/lib/own.so"},
		ociScript)
	stderr, err := b.runDetached(t, l.Wrapper, "--config", l.Config)
	if err != nil {
		t.Fatalf("gpuext-runc run: %v\n%s", err, stderr)
	}
	out := b.output(t, "READY")
	reg := l.Registry(t)
	e := ociAssertRegistered(t, reg, b.ID, b.CgroupsPath, "batch")
	wantEnv := map[string]string{
		"LD_PRELOAD":       "/lib/own.so:/run/gpuext/devrt/libgpuext-devrt.so",
		"GPUEXT_TENANT_ID": strconv.FormatUint(uint64(e.Tenant.ID), 10),
		"GPUEXT_POLICY":    "batch",
	}
	for k, want := range wantEnv {
		if got, _ := ociEnvValue(out, k); got != want {
			t.Errorf("container env %s=%q, want %q", k, got, want)
		}
	}
	devrt := out[strings.Index(out, "DEVRT:"):strings.Index(out, "TENANT:")]
	if !strings.Contains(devrt, "libgpuext-devrt.so") {
		t.Errorf("/run/gpuext/devrt in the container: %q", devrt)
	}
	if !strings.Contains(out, `"policy": "batch"`) || !strings.Contains(out, `"tenantId": `+wantEnv["GPUEXT_TENANT_ID"]) {
		t.Errorf("tenant config in the container:\n%s", out)
	}
	if !strings.Contains(out[strings.Index(out, "RO:"):], "Read-only file system") {
		t.Errorf("the devrt mount is writable in the container:\n%s", out)
	}
	// The entrypoint is busybox-static: LD_PRELOAD cannot reach it, and the
	// wrapper says so in its log.
	if !l.LogContains("device runtime will not load", "statically linked") {
		t.Errorf("the wrapper did not log that the static entrypoint cannot load the device runtime")
	}
	b.stop(t)
	if entries := ociFind(t, reg, b.ID); len(entries) != 0 {
		t.Fatalf("after poststop: %+v", entries)
	}
}

// TestOCIRuncStrict: a bad policy request in strict mode refuses the
// container, through the wrapper (before runc runs) and through a
// hand-installed hook (runc fails the createRuntime hook); the error names
// the key. In fail-open mode the same request runs with the default policy.
func TestOCIRuncStrict(t *testing.T) {
	ociRequirePrivileged(t, "runc", "busybox", "go")
	l := ociNewLab(t)
	bad := map[string]string{"policy.gpuext.io": "nope"}

	l.WriteConfig(t, "strict", nil)
	b := ociNewBundle(t, l, "strictw", bad, nil, ociScript)
	stderr, err := b.runDetached(t, l.Wrapper, "--config", l.Config)
	if err == nil || !strings.Contains(stderr, "policy.gpuext.io") {
		t.Fatalf("wrapper, strict: err %v, stderr %q; want a failure naming the key", err, stderr)
	}
	b2 := ociNewBundle(t, l, "stricth", bad, nil, ociScript)
	b2.addHooks(t, l)
	stderr, err = b2.runDetached(t, "runc")
	if err == nil || !strings.Contains(stderr, "policy.gpuext.io") {
		t.Fatalf("hook, strict: err %v, stderr %q; want a failure naming the key", err, stderr)
	}
	reg := l.Registry(t)
	if len(ociFind(t, reg, b.ID))+len(ociFind(t, reg, b2.ID)) != 0 {
		t.Fatal("refused containers are registered")
	}

	l.WriteConfig(t, "fail-open", nil)
	b3 := ociNewBundle(t, l, "open", bad, nil, ociScript)
	if stderr, err := b3.runDetached(t, l.Wrapper, "--config", l.Config); err != nil {
		t.Fatalf("wrapper, fail-open: %v\n%s", err, stderr)
	}
	out := b3.output(t, "READY")
	pol, _ := ociEnvValue(out, "GPUEXT_POLICY")
	if pol == "" || pol == "nope" {
		t.Fatalf("fail-open policy %q, want the default", pol)
	}
	ociAssertRegistered(t, reg, b3.ID, b3.CgroupsPath, pol)
	if !l.LogContains(b3.ID, "policy.gpuext.io", "default policy") {
		t.Fatal("no log line naming the key")
	}
	b3.stop(t)
}
