package lab

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/lib/testutil"
)

// Image is the busybox image every lab runtime has imported.
const Image = "localhost/gpuext-busybox:lab"

// ScriptsDir is the directory holding the lab scripts (this package's directory).
func ScriptsDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("lab: cannot locate source file")
	}
	return filepath.Dir(file)
}

// BinDir is where install-deps.sh put containerd, ctr, the shim, crictl
// and prometheus ($GPUEXT_LAB_BIN, else .cache/bin).
func BinDir() string {
	if d := os.Getenv("GPUEXT_LAB_BIN"); d != "" {
		return d
	}
	return filepath.Join(testutil.RepoRoot(), ".cache", "bin")
}

// RequireBinaries skips the test (fails it when CI=true) unless each of
// names is in dir, saying which script installs it (make deps runs them all).
func RequireBinaries(t testing.TB, dir, installer string, names ...string) {
	t.Helper()
	for _, b := range names {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			testutil.SkipOrFail(t, "%s missing: run %s (make deps)", filepath.Join(dir, b), installer)
		}
	}
}

// WorkDir is a fresh work dir for one lab instance, under /tmp: the
// sockets inside must keep their paths short (t.TempDir can be too long).
// The caller removes it, after the instance's clean-up.
func WorkDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatalf("lab work dir: %v", err)
	}
	return dir
}

// Containerd is a running private containerd started by StartContainerd.
// The fields are the values `containerd.sh env` prints.
type Containerd struct {
	Dir             string // GPUEXT_LAB_DIR of this instance
	Address         string // CONTAINERD_ADDRESS (grpc socket path)
	CRIEndpoint     string // CRI_ENDPOINT (unix://...)
	NRISocket       string // NRI_SOCKET, for external plugins
	PluginDir       string // NRI_PLUGIN_DIR, pre-installed plugins (NN-name)
	PluginConfigDir string // NRI_PLUGIN_CONFIG_DIR
	Log             string // GPUEXT_LAB_CONTAINERD_LOG
	PodLogDir       string // GPUEXT_LAB_POD_LOG_DIR
	CDIDir          string // GPUEXT_LAB_CDI_DIR, CRI's only cdi_spec_dirs entry
	Env             map[string]string

	baseEnv []string
}

// ContainerdOptions change how StartContainerd configures containerd.
type ContainerdOptions struct {
	// RuncWrapper, if set, adds CRI runtime handler "gpuext" that runs this
	// binary in place of runc (Pod option RuntimeHandler: "gpuext").
	RuncWrapper string
	// BeforeStart runs after the work dir exists and before containerd
	// starts: e.g. install a plugin into PluginDir.
	BeforeStart func(c *Containerd)
	// NRIValidator turns on NRI's default validator (containerd's
	// default_validator): a pod annotated
	// required-plugins.noderesource.dev is refused while a plugin it names
	// is not connected.
	NRIValidator bool
}

// StartContainerd starts a containerd with CRI and NRI in a fresh work dir
// and stops it, unmounts and removes the dir in t.Cleanup.
func StartContainerd(t testing.TB, opts ContainerdOptions) *Containerd {
	t.Helper()
	testutil.RequireRoot(t)
	RequireBinaries(t, BinDir(), "test/lab/install-deps.sh", "containerd", "ctr", "containerd-shim-runc-v2", "crictl")
	dir := WorkDir(t, "gpuext-labgo-")
	c := &Containerd{Dir: dir}
	c.baseEnv = append(os.Environ(), "GPUEXT_LAB_DIR="+dir)
	if opts.RuncWrapper != "" {
		c.baseEnv = append(c.baseEnv, "GPUEXT_RUNC_WRAPPER="+opts.RuncWrapper)
	}
	if opts.NRIValidator {
		c.baseEnv = append(c.baseEnv, "GPUEXT_LAB_NRI_VALIDATOR=1")
	}
	out, err := c.script(context.Background(), "containerd.sh", "env")
	if err != nil {
		t.Fatalf("containerd.sh env: %v\n%s", err, out)
	}
	c.Env = ParseExports(out)
	c.Address = c.Env["CONTAINERD_ADDRESS"]
	c.CRIEndpoint = c.Env["CRI_ENDPOINT"]
	c.NRISocket = c.Env["NRI_SOCKET"]
	c.PluginDir = c.Env["NRI_PLUGIN_DIR"]
	c.PluginConfigDir = c.Env["NRI_PLUGIN_CONFIG_DIR"]
	c.Log = c.Env["GPUEXT_LAB_CONTAINERD_LOG"]
	c.PodLogDir = c.Env["GPUEXT_LAB_POD_LOG_DIR"]
	c.CDIDir = c.Env["GPUEXT_LAB_CDI_DIR"]

	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if out, err := c.script(ctx, "containerd.sh", "clean"); err != nil {
			t.Errorf("containerd.sh clean: %v\n%s", err, out)
		}
		if t.Failed() {
			t.Logf("containerd log kept: see above; tail:\n%s", Tail(c.Log, 40))
		}
		_ = os.RemoveAll(dir)
	})
	for _, d := range []string{c.PluginDir, c.PluginConfigDir, c.PodLogDir, c.CDIDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("lab dir: %v", err)
		}
	}
	if opts.BeforeStart != nil {
		opts.BeforeStart(c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := c.script(ctx, "containerd.sh", "up"); err != nil {
		t.Fatalf("containerd.sh up: %v\n%s", err, out)
	}
	return c
}

// script runs a lab script with this instance's environment.
func (c *Containerd) script(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(ScriptsDir(), name), args...)
	cmd.Env = c.baseEnv
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// Crictl runs crictl against this containerd and returns its stdout.
func (c *Containerd) Crictl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.script(context.Background(), "containerd.sh", append([]string{"crictl"}, args...)...)
	if err != nil {
		t.Fatalf("crictl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// CrictlErr runs crictl and returns its output and error, for a call that
// may fail (a refused container).
func (c *Containerd) CrictlErr(args ...string) (string, error) {
	out, err := c.script(context.Background(), "containerd.sh", append([]string{"crictl"}, args...)...)
	if err != nil {
		return out, fmt.Errorf("crictl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// PodOptions describe the pod and container Pod creates (on top of
// test/lab/testdata/pod.json and ctr.json).
type PodOptions struct {
	PodAnnotations map[string]string // pod-level annotations (e.g. policy.gpuext.io/pod)
	Annotations    map[string]string // container annotations
	Labels         map[string]string // container labels
	Env            map[string]string // container env (before the template's GPUEXT_LAB=1)
	// CDIDevices are the container's CRI CDI devices (vendor/class=name),
	// as the kubelet passes those of a device plugin's Allocate; containerd
	// resolves them in CDIDir.
	CDIDevices     []string
	RuntimeHandler string // CRI runtime handler; "" for runc
}

// Pod is a one-container pod created through CRI.
type Pod struct {
	c           *Containerd
	Name        string
	ID          string // pod sandbox id
	ContainerID string
}

// RunPod creates pod NAME with one container NAME running `sh -c script`,
// starts it, and removes the pod in t.Cleanup.
func (c *Containerd) RunPod(t testing.TB, name, script string, opts PodOptions) *Pod {
	t.Helper()
	p, err := c.RunPodErr(t, name, script, opts)
	if err != nil {
		t.Fatalf("%v\ncontainerd log tail:\n%s", err, Tail(c.Log, 20))
	}
	return p
}

// RunPodErr is RunPod for a container the runtime may refuse: the error
// holds what cri.sh (crictl) said. The pod is removed in t.Cleanup, or
// with the containerd when its container was never created.
func (c *Containerd) RunPodErr(t testing.TB, name, script string, opts PodOptions) (*Pod, error) {
	t.Helper()
	var args []string
	for _, kv := range sortedPairs(opts.PodAnnotations) {
		args = append(args, "-p", kv)
	}
	for _, kv := range sortedPairs(opts.Annotations) {
		args = append(args, "-a", kv)
	}
	for _, kv := range sortedPairs(opts.Labels) {
		args = append(args, "-l", kv)
	}
	for _, kv := range sortedPairs(opts.Env) {
		args = append(args, "-e", kv)
	}
	for _, d := range opts.CDIDevices {
		args = append(args, "-d", d)
	}
	if opts.RuntimeHandler != "" {
		args = append(args, "-r", opts.RuntimeHandler)
	}
	args = append([]string{"run"}, append(args, name, script)...)
	out, err := c.script(context.Background(), "cri.sh", args...)
	if err != nil {
		return nil, fmt.Errorf("cri.sh run %s: %w\n%s", name, err, out)
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		return nil, fmt.Errorf("cri.sh run %s: unexpected output %q", name, out)
	}
	p := &Pod{c: c, Name: name, ID: f[0], ContainerID: f[1]}
	t.Cleanup(func() { _, _ = c.script(context.Background(), "cri.sh", "rm", p.ID) })
	return p, nil
}

// Wait waits until the container exited and returns its exit code.
func (p *Pod) Wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	secs := strconv.Itoa(int(timeout.Seconds() + 0.5))
	out, err := p.c.script(context.Background(), "cri.sh", "wait", p.ContainerID, secs)
	if err != nil {
		t.Fatalf("wait for container %s: %v\n%s", p.Name, err, out)
	}
	code, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("wait for container %s: exit code %q: %v", p.Name, out, err)
	}
	return code
}

// Logs returns what the container wrote to stdout and stderr so far.
func (p *Pod) Logs(t testing.TB) string {
	t.Helper()
	return p.c.Crictl(t, "logs", p.ContainerID)
}

// Env returns the container's environment as printed by `env` in its
// output: the lines of Logs that look like KEY=VALUE.
func (p *Pod) Env(t testing.TB) map[string]string {
	t.Helper()
	env := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(p.Logs(t)))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && k != "" && !strings.ContainsAny(k, " \t") {
			env[k] = v
		}
	}
	return env
}

// Pid returns the host pid of the container's first process (0 before start).
func (p *Pod) Pid(t testing.TB) int {
	t.Helper()
	out, err := p.c.script(context.Background(), "cri.sh", "pid", p.ContainerID)
	if err != nil {
		t.Fatalf("pid of %s: %v\n%s", p.Name, err, out)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("pid of %s: %q: %v", p.Name, out, err)
	}
	return pid
}

// Remove stops and removes the pod now (RunPod also does it in t.Cleanup).
func (p *Pod) Remove(t testing.TB) {
	t.Helper()
	if out, err := p.c.script(context.Background(), "cri.sh", "rm", p.ID); err != nil {
		t.Fatalf("remove pod %s: %v\n%s", p.Name, err, out)
	}
}

// CgroupV2Path returns the cgroup v2 path (relative to the v2 mount) of pid,
// from the "0::" line of /proc/PID/cgroup. On this project's hybrid hosts
// runc also places containers in the v2 tree, so bpf_get_current_cgroup_id()
// inside the container is the inode of that directory.
func CgroupV2Path(pid int) (string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", fmt.Errorf("read cgroup of pid %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return rest, nil
		}
	}
	return "", fmt.Errorf("pid %d has no cgroup v2 entry", pid)
}

// CgroupV2Mount returns where the cgroup v2 hierarchy is mounted
// (/sys/fs/cgroup on v2 hosts, /sys/fs/cgroup/unified on hybrid ones).
func CgroupV2Mount() (string, error) {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return "", fmt.Errorf("read mounts: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[2] == "cgroup2" {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("no cgroup2 mount")
}

// ParseExports reads the `export KEY=VALUE` lines a lab script's env command prints.
func ParseExports(out string) map[string]string {
	env := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimPrefix(strings.TrimSpace(line), "export ")
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = strings.Trim(v, `"`)
		}
	}
	return env
}

func sortedPairs(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// Tail returns the last n lines of a log file, or why it could not be read.
func Tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
