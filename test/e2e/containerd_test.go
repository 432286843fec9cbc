package e2e

// Real containerd 2.x + NRI + runc through CRI (crictl), with the gpuext NRI
// plugin pre-installed in containerd's plugin dir, as an operator installs it.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/lib/testutil"
	"github.com/gpuext/gpuext/test/lab"
)

// ctdLab is a private containerd with the gpuext plugin pre-installed.
type ctdLab struct {
	*lab.Containerd
	work     string
	pinDir   string
	stateDir string
	logFile  string
	image    string
}

// startCtdLab builds the plugin, installs it as 50-gpuext with its config in
// 50-gpuext.conf, and starts containerd.
func startCtdLab(t *testing.T, failMode string, extra ...map[string]string) *ctdLab {
	t.Helper()
	return startCtdLabWith(t, lab.ContainerdOptions{}, failMode, extra...)
}

// startCtdLabWith is startCtdLab with containerd options (opts.BeforeStart
// is the lab's own).
func startCtdLabWith(t *testing.T, opts lab.ContainerdOptions, failMode string, extra ...map[string]string) *ctdLab {
	t.Helper()
	root := testutil.RepoRoot()
	work, err := os.MkdirTemp("", "gpuext-ctd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	testutil.UnmountUnder(t, work) // the tenants' accounting dirs, before the removal
	bin := filepath.Join(work, "gpuext-nri-plugin")
	build := exec.Command("go", "build", "-o", bin, "./nri-plugin")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build plugin: %v\n%s", err, out)
	}
	devrt := installDevrt(t, filepath.Join(work, "devrt"))
	l := &ctdLab{
		work:     work,
		pinDir:   fmt.Sprintf("/sys/fs/bpf/gpuext-e2e-%d", time.Now().UnixNano()),
		stateDir: filepath.Join(work, "state"),
		logFile:  filepath.Join(work, "plugin.log"),
	}
	t.Cleanup(func() { os.RemoveAll(l.pinDir) })
	cfg := map[string]string{"failMode": failMode, "pinDir": l.pinDir, "stateDir": l.stateDir, "devrtDir": devrt,
		"logFile": l.logFile, "logLevel": "debug", "agentSocket": filepath.Join(work, "agent", "agent.sock")}
	for _, e := range extra {
		for k, v := range e {
			cfg[k] = v
		}
	}
	opts.BeforeStart = func(c *lab.Containerd) {
		data, _ := json.Marshal(cfg)
		if err := os.WriteFile(filepath.Join(c.PluginConfigDir, "50-gpuext.conf"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(c.PluginDir, "50-gpuext"), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l.Containerd = lab.StartContainerd(t, opts)
	l.image = l.Env["GPUEXT_LAB_IMAGE"]
	// The plugin is started by containerd; wait until it has configured
	// (when it did not, its log says why).
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("plugin log, tail:\n%s", lab.Tail(l.logFile, 20))
		}
	})
	waitFor(t, 20*time.Second, "plugin configured", func() bool { return strings.Contains(readFile(l.logFile), `"configured"`) })
	return l
}

// installDevrt installs the device runtime (testutil.BuildDevrt, built
// once per test binary) into dir as an operator installs it: a directory
// holding only the library. It returns dir.
func installDevrt(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testutil.BuildDevrt(t), admission.DevrtLibrary))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, admission.DevrtLibrary), data, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ctdPod is a CRI pod with any number of containers.
type ctdPod struct {
	l       *ctdLab
	name    string
	uid     string
	id      string
	podFile string
}

func (l *ctdLab) runPod(t *testing.T, name string, annotations map[string]string, opts ...podOpt) *ctdPod {
	t.Helper()
	r := l.runPodNoFatal(name, annotations, opts...)
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.pod.remove(t); os.Remove(r.pod.podFile) })
	return r.pod
}

func (p *ctdPod) remove(t *testing.T) {
	if p.id == "" {
		return
	}
	// Not t.Fatal: also used from cleanups.
	cmd := exec.Command(p.l.Env["GPUEXT_LAB_CRICTL"], "--config", p.l.Env["CRI_CONFIG_FILE"], "stopp", p.id)
	_ = cmd.Run()
	cmd = exec.Command(p.l.Env["GPUEXT_LAB_CRICTL"], "--config", p.l.Env["CRI_CONFIG_FILE"], "rmp", "-f", p.id)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("remove pod %s: %v\n%s", p.name, err, out)
	}
	p.id = ""
}

func writeJSON(t *testing.T, v any) string {
	t.Helper()
	f, err := os.CreateTemp("", "gpuext-cri-*.json")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	if err := json.NewEncoder(f).Encode(v); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return f.Name()
}

// containerSpec is a busybox container that prints what it sees, then sleeps.
func (p *ctdPod) containerSpec(name string, annotations, labels map[string]string, env map[string]string) string {
	var envs []map[string]string
	for k, v := range env {
		envs = append(envs, map[string]string{"key": k, "value": v})
	}
	script := `echo "== env"; env; echo "== devrt"; ls /run/gpuext/devrt; echo "== tenant"; cat /run/gpuext/tenant/config.json; ` +
		`echo "== probes"; cat /run/gpuext/tenant/probes/module.conf 2>&1; ` +
		`echo "== mounts"; grep /run/gpuext /proc/self/mounts; echo "== end"; exec sleep 300`
	return fmt.Sprintf("%s", mustJSON(map[string]any{
		"metadata":    map[string]any{"name": name},
		"image":       map[string]any{"image": p.l.image},
		"command":     []string{"/bin/sh", "-c", script},
		"envs":        envs,
		"labels":      labels,
		"annotations": annotations,
		"log_path":    name + ".log",
	}))
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// create runs crictl create; it returns the id, or the error output.
func (p *ctdPod) create(t *testing.T, name string, annotations, labels, env map[string]string) (string, error) {
	t.Helper()
	return p.createJSON(t, name, []byte(p.containerSpec(name, annotations, labels, env)))
}

// createJSON runs crictl create with a container's CRI config; it returns
// the id, or the error output.
func (p *ctdPod) createJSON(t *testing.T, name string, config []byte) (string, error) {
	t.Helper()
	spec := filepath.Join(t.TempDir(), name+".json")
	if err := os.WriteFile(spec, config, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(p.l.Env["GPUEXT_LAB_CRICTL"], "--config", p.l.Env["CRI_CONFIG_FILE"], "create", p.id, spec, p.podFile)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%v: %s", err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// ctdContainer is a started container and what it printed.
type ctdContainer struct {
	id     string
	pid    int
	env    map[string]string
	output string
}

func (p *ctdPod) start(t *testing.T, name string, annotations, labels, env map[string]string) ctdContainer {
	t.Helper()
	id, err := p.create(t, name, annotations, labels, env)
	if err != nil {
		t.Fatalf("crictl create %s: %v\nplugin log:\n%s", name, err, readFile(p.l.logFile))
	}
	p.l.Crictl(t, "start", id)
	c := ctdContainer{id: id}
	waitFor(t, 30*time.Second, name+" output", func() bool {
		c.output = p.l.Crictl(t, "logs", id)
		return strings.Contains(c.output, "== end")
	})
	var insp struct {
		Info struct {
			Pid int `json:"pid"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(p.l.Crictl(t, "inspect", "-o", "json", id)), &insp); err != nil {
		t.Fatalf("inspect %s: %v", name, err)
	}
	c.pid = insp.Info.Pid
	c.env = map[string]string{}
	section := ""
	for _, line := range strings.Split(c.output, "\n") {
		if strings.HasPrefix(line, "== ") {
			section = line
			continue
		}
		if section == "== env" {
			if k, v, ok := strings.Cut(line, "="); ok {
				c.env[k] = v
			}
		}
	}
	return c
}

// sectionOf returns the lines of a container's output after header, up to
// the next "== " header.
func sectionOf(output, header string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.Split(output, "\n") {
		if strings.HasPrefix(line, "== ") {
			in = line == header
			continue
		}
		if in {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// cgroupInode is the inode of the container's cgroup v2 directory, read
// from /proc/<pid>/cgroup: what bpf_get_current_cgroup_id() returns inside it.
func cgroupInode(t *testing.T, pid int) (string, uint64) {
	t.Helper()
	rel, err := lab.CgroupV2Path(pid)
	if err != nil {
		t.Fatal(err)
	}
	mnt, err := lab.CgroupV2Mount()
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(mnt, rel), &st); err != nil {
		t.Fatalf("stat cgroup of pid %d: %v", pid, err)
	}
	return rel, st.Ino
}

func (l *ctdLab) registry(t *testing.T) *bpf.Registry {
	t.Helper()
	reg, err := bpf.OpenRegistry(l.pinDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return reg
}

// tenantOf finds the registry entry of a container.
func tenantOf(t *testing.T, reg *bpf.Registry, ctrID string) (bpf.Tenant, bpf.CgroupEntry, bool) {
	t.Helper()
	list, err := reg.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range list {
		for _, cg := range tn.Cgroups {
			if cg.ContainerID == ctrID {
				return tn, cg, true
			}
		}
	}
	return bpf.Tenant{}, bpf.CgroupEntry{}, false
}

// assertSees checks what the container really saw against its registry entry.
func assertSees(t *testing.T, l *ctdLab, c ctdContainer, policy string, quota uint64, preload string) bpf.Tenant {
	t.Helper()
	reg := l.registry(t)
	tn, cg, ok := tenantOf(t, reg, c.id)
	if !ok {
		t.Fatalf("container %s is not in the registry; plugin log:\n%s", c.id, readFile(l.logFile))
	}
	if tn.Policy != policy || tn.Config.QuotaBytes != quota {
		t.Errorf("container %s: registry policy %q quota %d, want %q %d", c.id, tn.Policy, tn.Config.QuotaBytes, policy, quota)
	}
	rel, ino := cgroupInode(t, c.pid)
	if uint64(cg.CgroupID) != ino {
		t.Errorf("container %s: registry cgroup id %d, want inode %d of %s", c.id, cg.CgroupID, ino, rel)
	}
	if got := c.env[admission.EnvTenantID]; got != strconv.Itoa(int(tn.ID)) {
		t.Errorf("container %s saw GPUEXT_TENANT_ID=%q, registry says tenant %d", c.id, got, tn.ID)
	}
	if got := c.env[admission.EnvPolicy]; got != policy {
		t.Errorf("container %s saw GPUEXT_POLICY=%q, want %q", c.id, got, policy)
	}
	if got := c.env["LD_PRELOAD"]; got != preload {
		t.Errorf("container %s saw LD_PRELOAD=%q, want %q", c.id, got, preload)
	}
	if !strings.Contains(c.output, admission.DevrtLibrary) {
		t.Errorf("container %s: %s not visible under %s:\n%s", c.id, admission.DevrtLibrary, admission.ContainerDevrtDir, c.output)
	}
	if !strings.Contains(c.output, fmt.Sprintf(`"tenantId": %d`, tn.ID)) || !strings.Contains(c.output, fmt.Sprintf(`"policy": %q`, policy)) {
		t.Errorf("container %s: tenant config.json not as registered:\n%s", c.id, c.output)
	}
	for _, dir := range []string{admission.ContainerDevrtDir, admission.ContainerTenantDir, admission.ContainerBoardDir} {
		if !mountedWith(c.output, dir, "ro") {
			t.Errorf("container %s: %s is not a read-only mount:\n%s", c.id, dir, c.output)
		}
	}
	if !mountedWith(c.output, admission.ContainerAcctDir, "rw") {
		t.Errorf("container %s: %s is not a writable mount:\n%s", c.id, admission.ContainerAcctDir, c.output)
	}
	return tn
}

func mountedWith(output, dir, mode string) bool {
	for _, line := range strings.Split(output, "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[1] == dir && strings.HasPrefix(f[3], mode+",") {
			return true
		}
	}
	return false
}

const preloadLib = admission.ContainerDevrtDir + "/" + admission.DevrtLibrary

// TestContainerdPodTwoContainers: one pod, a pod-level default policy and a
// per-container override, a quota on the other; each container sees its env
// and mounts, the registry holds its real cgroup id; a bad annotation
// (fail-open) starts with the default policy and the error names the key;
// removing the pod empties the registry.
func TestContainerdPodTwoContainers(t *testing.T) {
	l := startCtdLab(t, "fail-open")
	pod := l.runPod(t, "twoctr", map[string]string{
		"policy.gpuext.io/pod":           "batch",
		"policy.gpuext.io/container.web": "latency-critical",
		"policy.gpuext.io/container.bad": "no-such-policy",
	})
	web := pod.start(t, "web", nil, nil, map[string]string{"LD_PRELOAD": "/lib/libexisting.so"})
	worker := pod.start(t, "worker", map[string]string{"quota.gpuext.io": "2GiB", "probes.gpuext.io": "launch-stats",
		"probe-kernels.gpuext.io": "_Z4vaddPKfS0_Pfi"}, nil, nil)
	bad := pod.start(t, "bad", nil, nil, nil)

	tw := assertSees(t, l, web, "latency-critical", 0, "/lib/libexisting.so:"+preloadLib)
	if admission.PriorityClassName(tw.Config.PriorityClass) != "latency-critical" {
		t.Errorf("web: priority class %d in the kernel-facing config", tw.Config.PriorityClass)
	}
	assertSees(t, l, worker, "batch", 2<<30, preloadLib)
	// The worker selected a device probe: the compiled module is in its
	// read-only tenant dir, where the device runtime reads it; the batch
	// policy's SM share reaches its config. Its probe-kernels.gpuext.io
	// limits the module to its kernel. The web container has no probes.
	if probes := sectionOf(worker.output, "== probes"); !strings.Contains(probes, "map ls_counters __gpuext_map_ls_counters") ||
		!strings.Contains(probes, "kernel _Z4vaddPKfS0_Pfi\n") {
		t.Errorf("worker: module.conf of launch-stats for _Z4vaddPKfS0_Pfi not in the tenant dir:\n%s", probes)
	}
	if cfg := sectionOf(worker.output, "== tenant"); !strings.Contains(cfg, `"smPercent": 40`) || !strings.Contains(cfg, `"launch-stats"`) ||
		!strings.Contains(cfg, `"_Z4vaddPKfS0_Pfi"`) {
		t.Errorf("worker: config.json lacks the batch SM share, the probe or its kernel:\n%s", cfg)
	}
	if probes := sectionOf(web.output, "== probes"); strings.Contains(probes, "map ") {
		t.Errorf("web selected no probes but has a module:\n%s", probes)
	}
	tb := assertSees(t, l, bad, "default", 0, preloadLib)
	if tb.Config.Flags&uint32(bpf.TenantFlagFailOpen) == 0 {
		t.Errorf("bad: fail-open flag not set in the registry")
	}
	log := readFile(l.logFile)
	if !strings.Contains(log, "policy.gpuext.io/container.bad") || !strings.Contains(log, "no-such-policy") {
		t.Errorf("plugin log does not name the bad key and value:\n%s", log)
	}
	ids := map[uint64]bool{}
	for _, c := range []ctdContainer{web, worker, bad} {
		_, ino := cgroupInode(t, c.pid)
		ids[ino] = true
	}
	if len(ids) != 3 {
		t.Errorf("the three containers share cgroups: %v", ids)
	}

	pod.remove(t)
	waitFor(t, 20*time.Second, "registry empty after pod removal", func() bool {
		list, err := l.registry(t).List()
		return err == nil && len(list) == 0
	})
}

// TestContainerdStrictRefuses: in strict mode a bad annotation refuses the
// container with a message naming the key; good containers still start.
func TestContainerdStrictRefuses(t *testing.T) {
	l := startCtdLab(t, "strict")
	pod := l.runPod(t, "strict", nil)
	_, err := pod.create(t, "bad", map[string]string{"quota.gpuext.io": "12XB"}, nil, nil)
	if err == nil {
		t.Fatal("strict mode: container with quota.gpuext.io=12XB was created")
	}
	if !strings.Contains(err.Error(), "quota.gpuext.io") || !strings.Contains(err.Error(), "12XB") {
		t.Errorf("strict refusal does not name the key and value: %v", err)
	}
	if !strings.Contains(readFile(l.logFile), "quota.gpuext.io") {
		t.Errorf("plugin log does not name the key:\n%s", readFile(l.logFile))
	}
	good := pod.start(t, "good", map[string]string{"policy.gpuext.io": "vector-search"}, nil, nil)
	assertSees(t, l, good, "vector-search", 0, preloadLib)
}

// TestContainerdRequiredPluginWhileAgentIsDown: NRI's default validator
// (containerd's default_validator, enable = true) refuses a container whose
// pod names gpuext in required-plugins.noderesource.dev while the gpuext
// plugin is not connected: containerd itself refuses it, the agent being
// down. With the agent up it starts under its policy; a pod that does not
// require gpuext (a fail-open node's) starts without it while it is down.
func TestContainerdRequiredPluginWhileAgentIsDown(t *testing.T) {
	l := startCtdLabWith(t, lab.ContainerdOptions{NRIValidator: true}, "strict")
	require := map[string]string{"required-plugins.noderesource.dev": `["gpuext"]`}
	pod := l.runPod(t, "required", require)
	up := pod.start(t, "up", map[string]string{"policy.gpuext.io": "batch"}, nil, nil)
	assertSees(t, l, up, "batch", 0, preloadLib)

	// the agent goes down: the plugin containerd started, by its path
	killPluginProcess(t, filepath.Join(l.PluginDir, "50-gpuext"))
	var err error
	waitFor(t, 20*time.Second, "containerd refusing the required plugin's pod", func() bool {
		var id string
		id, err = pod.create(t, fmt.Sprintf("down-%d", time.Now().UnixNano()), map[string]string{"policy.gpuext.io": "batch"}, nil, nil)
		if err == nil {
			l.Crictl(t, "rm", "-f", id) // made before containerd saw the plugin go
			return false
		}
		return true
	})
	// crictl quotes the runtime's message: required plugin \"gpuext\" not present
	if msg := strings.ReplaceAll(err.Error(), `\"`, `"`); !strings.Contains(msg, `required plugin "gpuext" not present`) {
		t.Fatalf("with the agent down: %v; want containerd's refusal naming the required plugin", err)
	}
	other := l.runPod(t, "not-required", nil)
	if _, err := other.create(t, "free", map[string]string{"policy.gpuext.io": "batch"}, nil, nil); err != nil {
		t.Fatalf("a pod that does not require gpuext, agent down: %v", err)
	}
}

// killPluginProcess SIGKILLs the process running the executable exe (the
// NRI plugin containerd started from its plugin dir) and waits for it to go.
func killPluginProcess(t *testing.T, exe string) {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil || p != exe {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "plugin process gone", func() bool {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			return err != nil || strings.Contains(string(b), ") Z ")
		})
		return
	}
	t.Fatalf("no process runs %s", exe)
}
