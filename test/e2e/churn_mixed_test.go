package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/lib/testutil"
)

// TestChurnNRIAndOCIHooksAtOnce: one agent, one registry, two runtimes at
// the same time. The agent runs inside a real containerd (NRI) while the
// real OCI hook binary, configured with the same agent socket, brings 300
// containers of a Docker-style runtime up and half of them down again;
// meanwhile 30 CRI pods start through crictl and a third of them are
// removed. Afterwards every live container of either path is registered
// exactly once, under a tenant of its own, every ended one is gone, and no
// tenant is left without a cgroup.
func TestChurnNRIAndOCIHooksAtOnce(t *testing.T) {
	ociRequirePrivileged(t, "go")
	const nOCI, nCRI = 300, 30
	l := startCtdLab(t, "fail-open", map[string]string{"reconcileInterval": "2s", "reconcileGrace": "1s"})

	// The OCI side: the hook binary, a config naming the plugin's agent socket.
	hookBin := filepath.Join(l.work, "gpuext-oci-hook")
	build := exec.Command("go", "build", "-o", hookBin, "./oci-hook/cmd/gpuext-oci-hook")
	build.Dir, build.Env = testutil.RepoRoot(), append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build hook: %v\n%s", err, out)
	}
	hookLog := filepath.Join(l.work, "hook.log")
	hookCfg := filepath.Join(l.work, "hook.json")
	data, _ := json.Marshal(map[string]string{"failMode": "strict", "pinDir": l.pinDir, "stateDir": l.stateDir,
		"logFile": hookLog, "agentSocket": filepath.Join(l.work, "agent", "agent.sock")})
	if err := os.WriteFile(hookCfg, data, 0o644); err != nil {
		t.Fatal(err)
	}

	ctrs := newChurnContainers(t, filepath.Join(l.work, "b"), "mixed", nOCI)
	pols := []string{"batch", "latency-critical", "default", "vector-search"}
	// hook runs one stage; strict mode, so a hook that could not reach the
	// agent or register exits non-zero and the test sees it.
	hook := func(c *churnContainer, stage string) error {
		st := specs.State{Version: specs.Version, ID: c.id, Status: "creating", Pid: c.proc.Process.Pid, Bundle: c.bundle}
		data, _ := json.Marshal(&st)
		cmd := exec.Command(hookBin, "--config", hookCfg, stage)
		cmd.Stdin = bytes.NewReader(data)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s %s: %v: %s", stage, c.id, err, out)
		}
		return nil
	}
	runHooks := func(list []*churnContainer, stage string) []error {
		work := make(chan *churnContainer)
		var mu sync.Mutex
		var errs []error
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for c := range work {
					if err := hook(c, stage); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				}
			}()
		}
		for _, c := range list {
			work <- c
		}
		close(work)
		wg.Wait()
		return errs
	}

	// The CRI side, at the same time: pods with one container each.
	type criCtr struct {
		pod  *ctdPod
		id   string
		live bool
	}
	cris := make([]*criCtr, nCRI)
	var criErrs []error
	var wg sync.WaitGroup
	wg.Add(1)
	start := time.Now()
	go func() {
		defer wg.Done()
		for i := range cris {
			p := l.runPodNoFatal(fmt.Sprintf("mixed-%02d", i), map[string]string{"policy.gpuext.io": pols[i%len(pols)]})
			if p.err != nil {
				criErrs = append(criErrs, p.err)
				continue
			}
			t.Cleanup(func() { p.pod.remove(t); os.Remove(p.pod.podFile) })
			id, err := p.pod.create(t, "main", nil, nil, nil)
			if err == nil {
				_, err = l.CrictlErr("start", id)
			}
			if err != nil {
				criErrs = append(criErrs, fmt.Errorf("pod %d: %w", i, err))
				continue
			}
			cris[i] = &criCtr{pod: p.pod, id: id, live: true}
		}
	}()
	errs := runHooks(ctrs, "createRuntime")
	wg.Wait()
	t.Logf("%d OCI containers and %d CRI pods brought up at once in %v", nOCI, nCRI, time.Since(start).Round(time.Millisecond))
	for _, err := range append(errs, criErrs...) {
		t.Error(err)
	}
	if t.Failed() {
		t.Fatalf("plugin log:\n%s\nhook log:\n%s", readFile(l.logFile), readFile(hookLog))
	}

	// Half the OCI containers end with their poststop; a third of the pods go.
	var ended []*churnContainer
	for i, c := range ctrs {
		if i%2 != 0 {
			continue
		}
		c.proc.Process.Kill() //nolint:errcheck
		c.proc.Wait()         //nolint:errcheck
		if err := os.Remove(c.cgroupDir); err != nil {
			t.Fatal(err)
		}
		c.live = false
		ended = append(ended, c)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i, c := range cris {
			if i%3 == 0 {
				c.pod.remove(t)
				c.live = false
			}
		}
	}()
	for _, err := range runHooks(ended, "poststop") {
		t.Error(err)
	}
	wg.Wait()
	reg := l.registry(t)
	want := map[string]bool{} // container id -> live
	for _, c := range ctrs {
		want[c.id] = c.live
	}
	for _, c := range cris {
		want[c.id] = c.live
	}
	waitReconciled(t, reg, want)
	list, err := reg.List()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	cgroupTenant := map[uint64]uint64{}
	for _, tn := range list {
		if len(tn.Cgroups) == 0 {
			t.Errorf("leaked tenant %d (%s): no cgroup", tn.ID, tn.Key)
			continue
		}
		for _, cg := range tn.Cgroups {
			seen[cg.ContainerID]++
			if prev, dup := cgroupTenant[uint64(cg.CgroupID)]; dup {
				t.Errorf("cgroup %d in tenants %d and %d", cg.CgroupID, prev, tn.ID)
			}
			cgroupTenant[uint64(cg.CgroupID)] = uint64(tn.ID)
			live, known := want[cg.ContainerID]
			switch {
			case !known:
				// the pod sandboxes are not tenants; anything else is foreign
				t.Errorf("tenant %d has an entry for unknown container %q", tn.ID, cg.ContainerID)
			case !live:
				t.Errorf("stale entry: tenant %d has cgroup %d of ended container %s", tn.ID, cg.CgroupID, cg.ContainerID)
			}
		}
		for _, dir := range []string{admission.TenantDir(l.stateDir, uint64(tn.ID)), admission.AcctDir(l.stateDir, uint64(tn.ID))} {
			if _, err := os.Stat(dir); err != nil {
				t.Errorf("live tenant %d lost its directory: %v", tn.ID, err)
			}
		}
	}
	liveOCI, liveCRI := 0, 0
	for id, live := range want {
		if !live {
			continue
		}
		if strings.HasPrefix(id, "mixed-") {
			liveOCI++
		} else {
			liveCRI++
		}
		if seen[id] != 1 {
			t.Errorf("live container %s registered %d times, want once", id, seen[id])
		}
	}
	t.Logf("after reconcile: %d tenants; live OCI %d, live CRI %d, each registered once", len(list), liveOCI, liveCRI)
	if liveOCI != nOCI/2 || liveCRI != nCRI-nCRI/3 {
		t.Fatalf("live OCI %d, CRI %d: want %d and %d", liveOCI, liveCRI, nOCI/2, nCRI-nCRI/3)
	}
}

// podOrErr is a pod started from a goroutine, where t.Fatal is not allowed.
type podOrErr struct {
	pod *ctdPod
	err error
}

// runPodNoFatal is runPod for goroutines: it returns the error.
// podOpt edits a pod's CRI config before it is run.
type podOpt func(pod map[string]any)

// hostPID puts the pod in the host's pid namespace (NODE), as a pod with
// hostPID: true.
func hostPID(pod map[string]any) {
	pod["linux"].(map[string]any)["security_context"] = map[string]any{"namespace_options": map[string]any{"network": 2, "pid": 2}}
}

func (l *ctdLab) runPodNoFatal(name string, annotations map[string]string, opts ...podOpt) podOrErr {
	uid := fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	pod := map[string]any{
		"metadata":      map[string]any{"name": name, "namespace": "gpuext-e2e", "uid": uid},
		"log_directory": filepath.Join(l.PodLogDir, uid),
		"annotations":   annotations,
		"linux": map[string]any{
			"cgroup_parent":    "/kubepods/besteffort/pod" + uid,
			"security_context": map[string]any{"namespace_options": map[string]any{"network": 2}},
		},
	}
	for _, o := range opts {
		o(pod)
	}
	f, err := os.CreateTemp("", "gpuext-cri-*.json")
	if err != nil {
		return podOrErr{err: err}
	}
	json.NewEncoder(f).Encode(pod) //nolint:errcheck
	f.Close()
	p := &ctdPod{l: l, name: name, uid: uid, podFile: f.Name()}
	out, err := l.CrictlErr("runp", p.podFile)
	if err != nil {
		os.Remove(f.Name())
		return podOrErr{err: fmt.Errorf("runp %s: %w", name, err)}
	}
	p.id = strings.TrimSpace(out)
	return podOrErr{pod: p}
}
