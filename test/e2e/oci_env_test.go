package e2e

// Helpers of the Docker/runc/podman end-to-end tests (oci_*_test.go). Every
// name here starts with "oci" so the containerd tests of this package can
// have their own.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuext/gpuext/lib/testutil"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup"
)

// ociRequirePrivileged skips without root locally and fails in CI (CI=true).
func ociRequirePrivileged(t *testing.T, tools ...string) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) == 0 {
		return
	}
	testutil.SkipOrFail(t, "privileged e2e test needs %s", strings.Join(missing, ", "))
}

func ociRandom(n int) string {
	b := make([]byte, n)
	rand.Read(b) //nolint:errcheck // never fails on Linux
	return hex.EncodeToString(b)
}

// ociLab is one test's private gpuext setup: static binaries, a device
// runtime dir, a state dir, a registry pinned under /sys/fs/bpf, a config
// file and its log.
type ociLab struct {
	Dir      string // short, under /tmp (socket paths)
	Bin      string // gpuext-oci-hook and gpuext-runc
	Hook     string
	Wrapper  string
	DevrtDir string
	StateDir string
	PinDir   string
	Config   string
	Log      string
	// Agent is the host agent (gpuext-nri-plugin --nri=false) the wrapper
	// and hooks call, at AgentSocket.
	Agent       string
	AgentSocket string
	agent       *exec.Cmd
	extra       map[string]any
}

func ociNewLab(t *testing.T) *ociLab {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "gx-oci-")
	if err != nil {
		t.Fatal(err)
	}
	dir, _ = filepath.EvalSymlinks(dir) // runc wants symlink-free absolute paths
	l := &ociLab{
		Dir: dir, Bin: filepath.Join(dir, "bin"), DevrtDir: filepath.Join(dir, "devrt"),
		StateDir: filepath.Join(dir, "state"), PinDir: "/sys/fs/bpf/gpuext-e2e-oci-" + ociRandom(4),
		Config: filepath.Join(dir, "gpuext.json"), Log: filepath.Join(dir, "gpuext.log"),
	}
	l.Hook = filepath.Join(l.Bin, "gpuext-oci-hook")
	l.Wrapper = filepath.Join(l.Bin, "gpuext-runc")
	l.Agent = filepath.Join(l.Bin, "gpuext-nri-plugin")
	l.AgentSocket = filepath.Join(dir, "agent", "agent.sock")
	t.Cleanup(func() {
		l.StopAgent(t)
		if t.Failed() {
			if data, err := os.ReadFile(l.Log); err == nil {
				t.Logf("gpuext log:\n%s", data)
			}
		}
		if err := os.RemoveAll(l.PinDir); err != nil {
			t.Errorf("remove pin dir: %v", err)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove work dir: %v", err)
		}
	})
	testutil.UnmountUnder(t, dir) // the tenants' accounting dirs, before the removal
	l.build(t)
	l.devrt(t)
	l.WriteConfig(t, "fail-open", nil)
	l.StartAgent(t)
	return l
}

// StartAgent starts the host agent without containerd, as the systemd unit
// of a Docker or podman host does, and waits for its socket.
func (l *ociLab) StartAgent(t *testing.T) {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(l.Dir, "agent.stderr"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	os.Remove(l.AgentSocket) // a killed agent's: wait for the new one's
	// the systemd unit's command line (deploy/systemd) with the lab's paths
	argv := ociUnitCommand(t, filepath.Dir(l.Agent), l.Config)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	l.agent = cmd
	ociWait(t, 20*time.Second, "agent socket", func() bool {
		_, err := os.Stat(l.AgentSocket)
		return err == nil
	})
}

// KillAgent kills the agent with SIGKILL, as an OOM kill or a crash would.
func (l *ociLab) KillAgent(t *testing.T) {
	t.Helper()
	if l.agent == nil {
		return
	}
	l.agent.Process.Kill() //nolint:errcheck
	l.agent.Wait()         //nolint:errcheck
	l.agent = nil
}

// StopAgent stops the agent (SIGTERM, as systemd does) and waits for it.
func (l *ociLab) StopAgent(t *testing.T) {
	t.Helper()
	if l.agent == nil {
		return
	}
	l.agent.Process.Signal(syscall.SIGTERM) //nolint:errcheck
	done := make(chan error, 1)
	go func() { done <- l.agent.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		l.agent.Process.Kill() //nolint:errcheck
		<-done
	}
	l.agent = nil
}

// build compiles the two binaries statically, as they ship.
func (l *ociLab) build(t *testing.T) {
	t.Helper()
	for _, b := range [][]string{
		{"-o", l.Bin + "/", "./oci-hook/cmd/gpuext-oci-hook", "./oci-hook/cmd/gpuext-runc"},
		{"-o", l.Agent, "./nri-plugin"},
	} {
		cmd := exec.Command("go", append([]string{"build"}, b...)...)
		cmd.Dir = testutil.RepoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
}

// Ctl builds gpuextctl into the lab's bin dir (once) and returns its path.
func (l *ociLab) Ctl(t *testing.T) string { return buildCtl(t, l.Bin) }

// buildCtl builds gpuextctl into dir (once per dir) and returns its path.
func buildCtl(t *testing.T, dir string) string {
	t.Helper()
	ctl := filepath.Join(dir, "gpuextctl")
	if _, err := os.Stat(ctl); err == nil {
		return ctl
	}
	build := exec.Command("go", "build", "-o", ctl, "./cmd/gpuextctl")
	build.Dir = testutil.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build gpuextctl: %v\n%s", err, out)
	}
	return ctl
}

// devrt installs the device runtime into the lab's devrt dir.
func (l *ociLab) devrt(t *testing.T) { installDevrt(t, l.DevrtDir) }

// WriteConfig (re)writes the gpuext config. The wrapper and hooks read it
// at every call; a running agent is restarted to read it, as an operator
// restarts the unit after a change.
func (l *ociLab) WriteConfig(t *testing.T, failMode string, extra map[string]any) {
	t.Helper()
	if extra != nil {
		l.extra = extra
	}
	cfg := map[string]any{
		"failMode": failMode, "pinDir": l.PinDir, "stateDir": l.StateDir, "devrtDir": l.DevrtDir,
		"logFile": l.Log, "logLevel": "debug", "hookPath": l.Hook, "agentSocket": l.AgentSocket,
	}
	defer func() {
		if l.agent != nil {
			l.StopAgent(t)
			l.StartAgent(t)
		}
	}()
	for k, v := range l.extra {
		cfg[k] = v
	}
	data, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(l.Config, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// LogContains reports whether the gpuext log has a line holding every part.
func (l *ociLab) LogContains(parts ...string) bool {
	data, _ := os.ReadFile(l.Log)
	for _, line := range strings.Split(string(data), "\n") {
		ok := true
		for _, p := range parts {
			if !strings.Contains(line, p) {
				ok = false
				break
			}
		}
		if ok && line != "" {
			return true
		}
	}
	return false
}

// Registry opens the test's pinned registry (as gpuextctl would).
func (l *ociLab) Registry(t *testing.T) *bpf.Registry {
	t.Helper()
	reg, err := bpf.OpenRegistry(l.PinDir)
	if err != nil {
		t.Fatalf("open registry %s: %v", l.PinDir, err)
	}
	t.Cleanup(func() { reg.Close() })
	return reg
}

// ociEntry is a registered cgroup with its tenant.
type ociEntry struct {
	Tenant bpf.Tenant
	Cgroup bpf.CgroupEntry
}

// ociFind returns the registry entries of a container.
func ociFind(t *testing.T, reg *bpf.Registry, containerID string) []ociEntry {
	t.Helper()
	tenants, err := reg.List()
	if err != nil {
		t.Fatalf("registry list: %v", err)
	}
	var out []ociEntry
	for _, tn := range tenants {
		for _, cg := range tn.Cgroups {
			if cg.ContainerID == containerID {
				out = append(out, ociEntry{Tenant: tn, Cgroup: cg})
			}
		}
	}
	return out
}

// ociTenantKeyLive reports whether a tenant with the key still exists.
func ociTenantKeyLive(t *testing.T, reg *bpf.Registry, key string) bool {
	t.Helper()
	_, ok, err := reg.LookupKey(key)
	if err != nil {
		t.Fatalf("registry lookup %q: %v", key, err)
	}
	return ok
}

// ociCgroupV2ID is the cgroup id the kernel gives the cgroup at path: the
// inode of its directory in the v2 hierarchy.
func ociCgroupV2ID(t *testing.T, path string) cgroup.ID {
	t.Helper()
	root := "/sys/fs/cgroup/unified"
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
		root = "/sys/fs/cgroup" // v2 only
	}
	fi, err := os.Stat(filepath.Join(root, path))
	if err != nil {
		t.Fatalf("cgroup v2 dir of %s: %v", path, err)
	}
	return cgroup.ID(fi.Sys().(*syscall.Stat_t).Ino)
}

// ociAssertRegistered checks that the container's one registry entry holds
// its real cgroup id and the policy, and returns it.
func ociAssertRegistered(t *testing.T, reg *bpf.Registry, id, cgroupsPath, policy string) ociEntry {
	t.Helper()
	entries := ociFind(t, reg, id)
	if len(entries) != 1 {
		t.Fatalf("registry entries of %s: %+v, want exactly one", id, entries)
	}
	e := entries[0]
	want := ociCgroupV2ID(t, cgroupsPath)
	if e.Cgroup.CgroupID != want {
		t.Fatalf("registered cgroup id %d, want %d (inode of the v2 dir of %s)", e.Cgroup.CgroupID, want, cgroupsPath)
	}
	if e.Tenant.Policy != policy {
		t.Fatalf("tenant policy %q, want %q", e.Tenant.Policy, policy)
	}
	return e
}

// ociWait polls cond every 100ms until it holds or timeout passes.
func ociWait(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ociRun runs a command with a timeout and returns stdout, stderr, error.
func ociRun(timeout time.Duration, env []string, name string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		err = errors.Join(err, fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), ctx.Err()))
	}
	return out.String(), errb.String(), err
}

// ociEnvValue returns the value of KEY in `env` output.
func ociEnvValue(envOut, key string) (string, bool) {
	for _, line := range strings.Split(envOut, "\n") {
		if v, ok := strings.CutPrefix(line, key+"="); ok {
			return v, true
		}
	}
	return "", false
}
