package plugin_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	nri "github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup/cgrouptest"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/internal/hostagent"
	"github.com/gpuext/gpuext/lib/testutil"
	"github.com/gpuext/gpuext/nri-plugin/plugin"
)

// runtimePeer is a container runtime built on the nri module's
// pkg/adaptation, the same runtime side containerd uses. It keeps the live
// pods and containers that Synchronize hands to plugins.
type runtimePeer struct {
	t   testing.TB
	nri *nri.Adaptation

	mu   sync.Mutex
	pods map[string]*api.PodSandbox
	ctrs map[string]*api.Container
}

func newRuntimePeer(t testing.TB, sock string) *runtimePeer {
	rp := &runtimePeer{t: t, pods: map[string]*api.PodSandbox{}, ctrs: map[string]*api.Container{}}
	dir := filepath.Dir(sock)
	r, err := nri.New("gpuext-test-runtime", "0.0.1", rp.synchronize, rp.update,
		nri.WithPluginPath(filepath.Join(dir, "plugins")),
		nri.WithPluginConfigPath(filepath.Join(dir, "conf.d")),
		nri.WithSocketPath(sock))
	if err != nil {
		t.Fatalf("nri adaptation: %v", err)
	}
	if err := r.Start(); err != nil {
		t.Fatalf("start nri adaptation: %v", err)
	}
	t.Cleanup(r.Stop)
	rp.nri = r
	return rp
}

func (rp *runtimePeer) synchronize(ctx context.Context, cb nri.SyncCB) error {
	rp.mu.Lock()
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	for _, p := range rp.pods {
		pods = append(pods, p)
	}
	for _, c := range rp.ctrs {
		ctrs = append(ctrs, c)
	}
	rp.mu.Unlock()
	_, err := cb(ctx, pods, ctrs)
	return err
}

func (rp *runtimePeer) update(context.Context, []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	return nil, nil
}

// create runs the NRI create+start sequence of one container and returns
// the adjustment the plugins made.
func (rp *runtimePeer) create(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, error) {
	rp.mu.Lock()
	rp.pods[pod.Id] = pod
	rp.mu.Unlock()
	resp, err := rp.nri.CreateContainer(ctx, &nri.CreateContainerRequest{Pod: pod, Container: ctr})
	if err != nil {
		return nil, err
	}
	ctr.State = api.ContainerState_CONTAINER_CREATED
	rp.mu.Lock()
	rp.ctrs[ctr.Id] = ctr
	rp.mu.Unlock()
	// As containerd 2.x: the task (and the cgroup) is created, then
	// StartContainer goes to the plugins before the task starts.
	if err := rp.nri.StartContainer(ctx, &nri.StartContainerRequest{Pod: pod, Container: ctr}); err != nil {
		return nil, err
	}
	ctr.State = api.ContainerState_CONTAINER_RUNNING
	return resp.GetAdjust(), nil
}

func (rp *runtimePeer) remove(ctx context.Context, pod *api.PodSandbox, ctr *api.Container, notify bool) error {
	rp.mu.Lock()
	delete(rp.ctrs, ctr.Id)
	rp.mu.Unlock()
	if !notify {
		return nil
	}
	return rp.nri.RemoveContainer(ctx, &nri.RemoveContainerRequest{Pod: pod, Container: ctr})
}

// startPlugin runs the gpuext plugin as an external plugin on sock; wrap, if
// given, wraps it (the benchmark times the handlers that way).
func startPlugin(t testing.TB, rp *runtimePeer, cfg config.Config, sock string, wrap ...func(*plugin.Plugin) any) stub.Stub {
	lg := logrus.New()
	lg.SetLevel(logrus.DebugLevel)
	if os.Getenv("GPUEXT_TEST_LOG") == "" {
		lg.SetOutput(devNull(t))
	}
	synced := &syncHook{done: make(chan struct{})}
	lg.AddHook(synced)
	a := hostagent.New(cfg, logrus.NewEntry(lg))
	t.Cleanup(a.Stop)
	var p any = plugin.New(a)
	if len(wrap) > 0 {
		p = wrap[0](p.(*plugin.Plugin))
	}
	s, err := stub.New(p, stub.WithPluginName("gpuext"), stub.WithPluginIdx("50"), stub.WithSocketPath(sock))
	if err != nil {
		t.Fatalf("plugin stub: %v", err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("start plugin: %v", err)
	}
	select { // registration and Synchronize are asynchronous
	case <-synced.done:
	case <-time.After(60 * time.Second):
		t.Fatal("plugin did not synchronize within 60s")
	}
	// The runtime registers the plugin when its sync finishes; taking the
	// sync lock waits for that, so no event is sent before it counts.
	rp.nri.BlockPluginSync().Unblock()
	return s
}

// syncHook closes done when the plugin logs that it synchronized.
type syncHook struct {
	once sync.Once
	done chan struct{}
}

func (h *syncHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h *syncHook) Fire(e *logrus.Entry) error {
	if e.Message == "synchronized" {
		h.once.Do(func() { close(h.done) })
	}
	return nil
}

func devNull(t testing.TB) *os.File {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// live is a container the runtime peer holds.
type live struct {
	pod   *api.PodSandbox
	ctr   *api.Container
	cgID  uint64
	index int
}

type fixture struct {
	cfg      config.Config
	sock     string
	cgParent string // cgroup path of the parent of all test container cgroups
	v2Parent string // its directory
}

func newFixture(t testing.TB) fixture {
	testutil.RequireRoot(t)
	dir, err := os.MkdirTemp("/tmp", "gpuext-nri-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	pin := fmt.Sprintf("/sys/fs/bpf/gpuext-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() { os.RemoveAll(pin) })
	v2dir, _ := cgrouptest.New(t)
	cfg := config.Default()
	cfg.PinDir = pin
	// The state dir lives on tmpfs, as the default /run/gpuext does on a host.
	cfg.StateDir = filepath.Join(dir, "state")
	if err := os.Mkdir(cfg.StateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", cfg.StateDir, "tmpfs", 0, "mode=0755"); err != nil {
		t.Fatalf("mount tmpfs state dir: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(cfg.StateDir, syscall.MNT_DETACH) })
	cfg.DevrtDir = filepath.Join(dir, "devrt")
	cfg.AgentSocket = filepath.Join(dir, "agent", "agent.sock")
	root := cgrouptest.V2Root(t)
	return fixture{cfg: cfg, sock: filepath.Join(dir, "nri.sock"), v2Parent: v2dir,
		cgParent: "/" + strings.TrimPrefix(strings.TrimPrefix(v2dir, root), "/")}
}

// mkContainer makes container i (two per pod) with a real cgroup directory.
// Pod-level keys depend on the pod (i/2), container keys on i, so both
// containers of a pod see the same pod.
func (f fixture) mkContainer(t testing.TB, i int) (*api.PodSandbox, *api.Container, uint64) {
	podID := fmt.Sprintf("pod%04d", i/2)
	pod := &api.PodSandbox{Id: podID, Name: podID, Uid: "uid-" + podID, Namespace: []string{"default", "prod", "batch"}[i%3],
		Annotations: map[string]string{}}
	name := fmt.Sprintf("c%d", i%2)
	ctr := &api.Container{Id: fmt.Sprintf("ctr%05d", i), PodSandboxId: podID, Name: name,
		Annotations: map[string]string{}, Labels: map[string]string{}, Env: []string{"PATH=/bin"},
		Linux: &api.LinuxContainer{CgroupsPath: fmt.Sprintf("%s/ctr%05d", f.cgParent, i)}}
	switch (i / 2) % 3 {
	case 1: // pod default, per-container override for c1
		pod.Annotations["policy.gpuext.io/pod"] = "batch"
		pod.Annotations["policy.gpuext.io/container.c1"] = "latency-critical"
	case 2: // pod-level default only
		pod.Annotations["policy.gpuext.io/pod"] = "vector-search"
	}
	switch i % 4 {
	case 1: // parameterised quota on the container
		ctr.Annotations["policy.gpuext.io"] = "quota"
		ctr.Annotations["quota.gpuext.io"] = fmt.Sprintf("%dGiB", 1+i%3)
		ctr.Env = append(ctr.Env, "LD_PRELOAD=/usr/lib/libfoo.so")
	case 2: // a bad request: fail-open gives the default, unless a pod key wins
		ctr.Annotations["policy.gpuext.io"] = "no-such-policy"
	case 3: // docker-style label
		ctr.Labels["policy.gpuext.io"] = "batch"
	}
	dir := filepath.Join(f.v2Parent, ctr.Id)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	return pod, ctr, st.Ino
}

// wantPolicy is what container i must get: KEY/container.NAME > KEY/pod > KEY.
func wantPolicy(i int) (policy string, quota uint64, failedOpen bool) {
	if i%4 == 1 {
		quota = uint64(1+i%3) << 30
	}
	switch (i / 2) % 3 {
	case 1:
		if i%2 == 1 {
			return "latency-critical", quota, false
		}
		return "batch", quota, false
	case 2:
		return "vector-search", quota, false
	}
	switch i % 4 {
	case 1:
		return "quota", quota, false
	case 2:
		return "default", 0, true
	case 3:
		return "batch", 0, false
	}
	return "default", 0, false
}

func envOf(adj *api.ContainerAdjustment) map[string]string {
	m := map[string]string{}
	for _, e := range adj.GetEnv() {
		m[e.Key] = e.Value
	}
	return m
}

// TestNRIThousandContainersAndRestart drives the plugin through the nri
// module's runtime side with 1,000 containers of mixed annotations, asserts
// every adjustment and registry entry, then kills the plugin midway, changes
// the live set while it is down, restarts it and checks that after
// Synchronize the registry holds exactly the live set.
func TestNRIThousandContainersAndRestart(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	rp := newRuntimePeer(t, f.sock)
	s := startPlugin(t, rp, f.cfg, f.sock)

	const n = 1000
	alive := map[string]live{}
	for i := 0; i < n; i++ {
		if i == n/2 {
			// Kill the plugin midway. While it is down, 50 containers go away
			// and 20 new ones come up that it never sees.
			s.Stop()
			removed := 0
			for id, l := range alive {
				if removed == 50 {
					break
				}
				if err := rp.remove(ctx, l.pod, l.ctr, false); err != nil {
					t.Fatal(err)
				}
				delete(alive, id)
				removed++
			}
			for k := 0; k < 20; k++ {
				j := n + k
				pod, ctr, id := f.mkContainer(t, j)
				if _, err := rp.create(ctx, pod, ctr); err != nil { // no plugin attached now
					t.Fatal(err)
				}
				alive[ctr.Id] = live{pod, ctr, id, j}
			}
			s = startPlugin(t, rp, f.cfg, f.sock) // returns once Synchronize ran
			assertRegistry(t, f.cfg, alive)
		}
		pod, ctr, cgID := f.mkContainer(t, i)
		adj, err := rp.create(ctx, pod, ctr)
		if err != nil {
			t.Fatalf("container %d: %v", i, err)
		}
		env := envOf(adj)
		policy, _, _ := wantPolicy(i)
		if env[admission.EnvPolicy] != policy {
			t.Fatalf("container %d: GPUEXT_POLICY=%q, want %q", i, env[admission.EnvPolicy], policy)
		}
		wantPreload := "/run/gpuext/devrt/libgpuext-devrt.so"
		if i%4 == 1 {
			wantPreload = "/usr/lib/libfoo.so:" + wantPreload
		}
		if env["LD_PRELOAD"] != wantPreload {
			t.Fatalf("container %d: LD_PRELOAD=%q, want %q", i, env["LD_PRELOAD"], wantPreload)
		}
		if len(adj.GetMounts()) != 4 || adj.GetMounts()[0].Destination != admission.ContainerDevrtDir ||
			adj.GetMounts()[1].Destination != admission.ContainerTenantDir ||
			adj.GetMounts()[2].Destination != admission.ContainerAcctDir || adj.GetMounts()[3].Destination != admission.ContainerBoardDir {
			t.Fatalf("container %d: mounts %v", i, adj.GetMounts())
		}
		tenantDir := adj.GetMounts()[1].Source
		if want := filepath.Join(f.cfg.StateDir, "tenants", env[admission.EnvTenantID]); tenantDir != want {
			t.Fatalf("container %d: tenant dir %q, want %q", i, tenantDir, want)
		}
		alive[ctr.Id] = live{pod, ctr, cgID, i}
	}
	s.Stop()
	assertRegistry(t, f.cfg, alive)

	// Removing every container empties the registry.
	s = startPlugin(t, rp, f.cfg, f.sock)
	defer s.Stop()
	for _, l := range alive {
		if err := rp.remove(ctx, l.pod, l.ctr, true); err != nil {
			t.Fatal(err)
		}
	}
	reg := openReg(t, f.cfg)
	tenants, err := reg.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(tenants) != 0 {
		var ids []string
		for _, tn := range tenants {
			for _, cg := range tn.Cgroups {
				ids = append(ids, cg.ContainerID+"/"+tn.Policy)
			}
		}
		t.Fatalf("registry holds %d tenants after removing every container, want 0: %v", len(tenants), ids)
	}
	if ents, _ := os.ReadDir(filepath.Join(f.cfg.StateDir, "tenants")); len(ents) != 0 {
		t.Fatalf("%d tenant dirs left after removing every container", len(ents))
	}
}

func openReg(t testing.TB, cfg config.Config) *bpf.Registry {
	reg, err := bpf.OpenRegistry(cfg.PinDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return reg
}

// assertRegistry checks that the registry holds exactly the live containers,
// each with its real cgroup id, policy and quota.
func assertRegistry(t testing.TB, cfg config.Config, alive map[string]live) {
	t.Helper()
	reg := openReg(t, cfg)
	tenants, err := reg.List()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, tn := range tenants {
		for _, cg := range tn.Cgroups {
			e, ok := alive[cg.ContainerID]
			if !ok {
				t.Fatalf("registry holds container %s (tenant %d), which is not live", cg.ContainerID, tn.ID)
			}
			if seen[cg.ContainerID] {
				t.Fatalf("container %s registered twice", cg.ContainerID)
			}
			seen[cg.ContainerID] = true
			if uint64(cg.CgroupID) != e.cgID {
				t.Fatalf("container %s: cgroup id %d, want inode %d", cg.ContainerID, cg.CgroupID, e.cgID)
			}
			policy, quota, failedOpen := wantPolicy(e.index)
			if tn.Policy != policy || tn.Config.QuotaBytes != quota {
				t.Fatalf("container %s (#%d): policy %q quota %d, want %q %d", cg.ContainerID, e.index, tn.Policy,
					tn.Config.QuotaBytes, policy, quota)
			}
			if got := tn.Config.Flags&uint32(bpf.TenantFlagFailOpen) != 0; got != failedOpen {
				t.Fatalf("container %s: fail-open flag %v, want %v", cg.ContainerID, got, failedOpen)
			}
			if tn.Config.TenantId != uint32(tn.ID) {
				t.Fatalf("tenant %d: config carries tenant id %d", tn.ID, tn.Config.TenantId)
			}
			if tn.Key != "nri/ctr/"+cg.ContainerID {
				t.Fatalf("tenant %d: key %q", tn.ID, tn.Key)
			}
		}
		if len(tn.Cgroups) == 0 {
			t.Fatalf("tenant %d (%s) has no cgroup", tn.ID, tn.Key)
		}
	}
	if len(seen) != len(alive) {
		t.Fatalf("registry holds %d containers, %d are live", len(seen), len(alive))
	}
}

// TestAgentWithoutItsAPIExits: an agent that cannot serve its API (its
// socket dir cannot be made) does not run on without it: NRI's Configure
// fails with an error naming the socket, and the agent exits with it.
func TestAgentWithoutItsAPIExits(t *testing.T) {
	f := newFixture(t)
	notADir := filepath.Join(filepath.Dir(f.cfg.AgentSocket), "file")
	if err := os.MkdirAll(filepath.Dir(notADir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f.cfg.AgentSocket = filepath.Join(notADir, "agent.sock")
	lg := logrus.New()
	lg.SetOutput(io.Discard)
	a := hostagent.New(f.cfg, logrus.NewEntry(lg))
	defer a.Stop()
	_, err := plugin.New(a).Configure(context.Background(), "", "none", "")
	if err == nil || !strings.Contains(err.Error(), f.cfg.AgentSocket) {
		t.Fatalf("Configure with an agent socket that cannot be served: %v; want an error naming %s", err, f.cfg.AgentSocket)
	}
}
