package e2e

// A real single-node Kubernetes cluster (test/k8s/cluster.sh): etcd, the
// apiserver, controller-manager, scheduler and a kubelet on the lab's
// containerd with CRI and NRI. The tests use only kubectl and helm, as a user.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/lib/testutil"
	"github.com/gpuext/gpuext/test/k8s/k8slab"
	"github.com/gpuext/gpuext/test/lab"
)

// k8sPod is a host-network pod of one busybox container running script.
func k8sPod(name, script string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: default
spec:
  hostNetwork: true
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: %s
    imagePullPolicy: Never
    command: ["sh", "-c", %q]
`, name, k8slab.Image, script)
}

// TestK8sClusterRunsPod: the scheduler places a host-network pod on the node,
// the kubelet runs it through containerd under the kubelet's cgroup root, it
// answers kubectl logs and exec (apiserver to kubelet), and deleting it
// removes its container from containerd.
func TestK8sClusterRunsPod(t *testing.T) {
	c := k8slab.Start(t, k8slab.Options{})

	nodes := c.K(t, "get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.nodeInfo.kubeletVersion} {.status.nodeInfo.containerRuntimeVersion}{"\n"}{end}`)
	if f := strings.Fields(nodes); len(f) != 3 || f[0] != k8slab.Node || f[1] != "v1.37.2" || !strings.HasPrefix(f[2], "containerd://2.4") {
		t.Fatalf("nodes: got %q, want one node %s with kubelet v1.37.2 on containerd 2.4", nodes, k8slab.Node)
	}

	c.Apply(t, k8sPod("hello", "echo hello-from-k8slab; exec sleep 3600"))
	c.WaitFor(t, "default", "condition=Ready", "pod/hello", 2*time.Minute)

	got := c.K(t, "-n", "default", "get", "pod", "hello", "-o",
		`jsonpath={.spec.nodeName} {.status.podIP} {.status.hostIP} {.status.containerStatuses[0].containerID}`)
	f := strings.Fields(got)
	if len(f) != 4 || f[0] != k8slab.Node || f[1] != f[2] || !strings.HasPrefix(f[3], "containerd://") {
		t.Fatalf("pod hello: got %q, want node %s, host network (pod IP = host IP), a containerd container", got, k8slab.Node)
	}
	ctrID := strings.TrimPrefix(f[3], "containerd://")

	waitFor(t, 30*time.Second, "hello's log line", func() bool {
		out, err := c.KubectlErr("-n", "default", "logs", "hello")
		return err == nil && strings.Contains(out, "hello-from-k8slab")
	})
	cg := c.K(t, "-n", "default", "exec", "hello", "--", "cat", "/proc/self/cgroup")
	if !strings.Contains(cg, c.CgroupRoot+"/kubepods/besteffort/pod") {
		t.Fatalf("container cgroups:\n%s\nwant them below the kubelet's %s/kubepods/besteffort", cg, c.CgroupRoot)
	}
	if ids := c.Ctr(t, "containers", "ls", "-q"); !strings.Contains(ids, ctrID) {
		t.Fatalf("containerd does not list the pod's container %s:\n%s", ctrID, ids)
	}

	c.K(t, "-n", "default", "delete", "pod", "hello", "--wait=true", "--timeout=60s")
	waitFor(t, 30*time.Second, "the container gone from containerd", func() bool {
		return !strings.Contains(c.Ctr(t, "containers", "ls", "-q"), ctrID)
	})
}

// k8sAgentImage builds the agent's image as `make image` does, from static
// binaries and the device runtime built here, and returns the archive.
func k8sAgentImage(t *testing.T, work, name string) string {
	t.Helper()
	root := testutil.RepoRoot()
	bin := filepath.Join(work, "bin")
	for out, pkg := range map[string]string{
		"gpuext-nri-plugin": "./nri-plugin", "gpuext-oci-hook": "./oci-hook/cmd/gpuext-oci-hook",
		"gpuext-runc": "./oci-hook/cmd/gpuext-runc", "gpuextctl": "./cmd/gpuextctl",
	} {
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(bin, out), pkg)
		cmd.Dir, cmd.Env = root, append(os.Environ(), "CGO_ENABLED=0")
		if o, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, o)
		}
	}
	installDevrt(t, filepath.Join(bin, "devrt")) // bin/devrt/libgpuext-devrt.so, where the image builder takes it
	tar := filepath.Join(work, "gpuext-image.tar")
	cmd := exec.Command("go", "run", "./deploy/image", "--bin", bin, "--name", name, "--out", tar)
	cmd.Dir = root
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./deploy/image: %v\n%s", err, o)
	}
	return tar
}

// k8sGPUPod is a host-network busybox pod asking for units of
// gpuext.io/gpu-memory, with pod annotations; it prints its env, mounts and
// cgroups, then sleeps.
func k8sGPUPod(name string, units int, annotations map[string]string) string {
	var ann strings.Builder
	for _, kv := range sortedKV(annotations) {
		fmt.Fprintf(&ann, "    %s: %q\n", kv[0], kv[1])
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: default
  annotations:
%sspec:
  hostNetwork: true
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: %s
    imagePullPolicy: Never
    command: ["sh", "-c", "env; echo '== mounts'; cat /proc/self/mounts; echo '== cgroup'; cat /proc/self/cgroup; echo '== end'; exec sleep 3600"]
    resources:
      limits:
        gpuext.io/gpu-memory: %d
`, name, ann.String(), k8slab.Image, units)
}

func sortedKV(m map[string]string) [][2]string {
	out := make([][2]string, 0, len(m))
	for k, v := range m {
		out = append(out, [2]string{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// k8sGPUContainer is what a running GPU pod's container showed and where
// the agent put it.
type k8sGPUContainer struct {
	pod, id string
	env     map[string]string
	output  string
}

// k8sRunning waits until pod is Ready and its container printed its
// sections; it returns the container's id and output.
func k8sRunning(t *testing.T, c *k8slab.Cluster, pod string) k8sGPUContainer {
	t.Helper()
	c.WaitFor(t, "default", "condition=Ready", "pod/"+pod, 2*time.Minute)
	id := strings.TrimPrefix(c.K(t, "-n", "default", "get", "pod", pod, "-o", "jsonpath={.status.containerStatuses[0].containerID}"), "containerd://")
	var out string
	waitFor(t, 30*time.Second, pod+"'s output", func() bool {
		o, err := c.KubectlErr("-n", "default", "logs", pod)
		out = o
		return err == nil && strings.Contains(o, "== end")
	})
	env := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "== ") {
			break
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return k8sGPUContainer{pod: pod, id: id, env: env, output: out}
}

// k8sCgroupInode is the inode of the cgroup v2 directory the container
// printed ("0::PATH"): what bpf_get_current_cgroup_id() returns in it.
func k8sCgroupInode(t *testing.T, ctr k8sGPUContainer) uint64 {
	t.Helper()
	for _, line := range strings.Split(sectionOf(ctr.output, "== cgroup"), "\n") {
		if rel, ok := strings.CutPrefix(line, "0::"); ok {
			mnt, err := lab.CgroupV2Mount()
			if err != nil {
				t.Fatal(err)
			}
			var st syscall.Stat_t
			if err := syscall.Stat(filepath.Join(mnt, rel), &st); err != nil {
				t.Fatalf("%s: stat its cgroup: %v", ctr.pod, err)
			}
			return st.Ino
		}
	}
	t.Fatalf("%s printed no cgroup v2 line:\n%s", ctr.pod, ctr.output)
	return 0
}

// k8sTenants lists the registry: container id -> tenant, and how many
// cgroup entries each container id has.
func k8sTenants(t *testing.T, pinDir string) (map[string]bpf.Tenant, map[string]int) {
	t.Helper()
	reg, err := bpf.OpenRegistry(pinDir)
	if err != nil {
		t.Fatalf("open the agent's registry in %s: %v", pinDir, err)
	}
	defer reg.Close()
	list, err := reg.List()
	if err != nil {
		t.Fatal(err)
	}
	byCtr, count := map[string]bpf.Tenant{}, map[string]int{}
	for _, tn := range list {
		for _, cg := range tn.Cgroups {
			byCtr[cg.ContainerID] = tn
			count[cg.ContainerID]++
		}
	}
	return byCtr, count
}

// TestK8sChartGPUMemory is issue 15's story on a real cluster, through helm
// and kubectl only: the chart's DaemonSet runs the agent (the image built
// here, imported with ctr) as containerd's NRI plugin and device plugin; the
// node advertises gpuext.io/gpu-memory from the config (8 GiB, no GPU here,
// so no CDI spec either: the device plugin gives the env, cdi.enabled false);
// a pod's request becomes its tenant's quota (an annotation lowers it), with
// the env and mounts injected and its cgroup in the registry; a pod that
// does not fit stays Pending with the scheduler's Insufficient event and
// runs once memory is freed; deleting a pod removes its tenant; a restarted
// agent keeps every live tenant once; helm uninstall cleans the node while
// the pods keep running.
func TestK8sChartGPUMemory(t *testing.T) {
	// The chart's bpffs.mountPropagation None (this host's mounts are
	// private): the node must have bpffs before the agent starts.
	work, pinDir := k8sWorkDirs(t, "k8se2e")
	stateDir := filepath.Join(work, "state")

	const image = "localhost/gpuext:k8s-e2e"
	tar := k8sAgentImage(t, work, image)
	c := k8slab.Start(t, k8slab.Options{})
	c.ImportImage(t, tar)

	values := filepath.Join(work, "values.yaml")
	name, tag, _ := strings.Cut(image, ":")
	if err := os.WriteFile(values, []byte(fmt.Sprintf(`image: {name: %s, tag: %s, pullPolicy: Never}
nri: {socket: %s}
bpffs: {mountPropagation: None}
state: {mountPropagation: None}
config:
  failMode: strict
  logLevel: debug
  pinDir: %s
  stateDir: %s
  devrtDir: %s
  agentSocket: %s
kubeletDir: %s
devicePlugin:
  enabled: true
  gpus: [{memory: 8GiB}]
  cdi: {enabled: false}
`, name, tag, c.NRISocket, pinDir, stateDir, filepath.Join(work, "devrt"), filepath.Join(work, "sock", "agent.sock"), c.KubeletRoot)), 0o644); err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join(testutil.RepoRoot(), "deploy", "helm", "gpuext")
	if out, err := c.HelmErr("install", "gpuext", chart, "-n", "gpuext-system", "--create-namespace",
		"-f", values, "--wait", "--timeout", "3m"); err != nil {
		t.Fatalf("%v\n%s\nagent pods:\n%s", err, out, c.K(t, "-n", "gpuext-system", "describe", "pods"))
	}
	uninstalled := false
	t.Cleanup(func() {
		if !uninstalled {
			_, _ = c.HelmErr("uninstall", "gpuext", "-n", "gpuext-system", "--wait", "--timeout", "1m")
		}
	})
	agentLog := func() string {
		out, _ := c.KubectlErr("-n", "gpuext-system", "logs", "daemonset/gpuext", "-c", "gpuext")
		return out
	}

	// The DaemonSet's pod is Ready (its probe pings the agent, which serves
	// its socket once containerd configured it over NRI) and says so.
	agentPod := c.K(t, "-n", "gpuext-system", "get", "pods", "-o", "jsonpath={.items[*].metadata.name}")
	if agentPod == "" || strings.Contains(agentPod, " ") {
		t.Fatalf("agent pods after helm install: %q, want one", agentPod)
	}
	c.WaitFor(t, "gpuext-system", "condition=Ready", "pod/"+agentPod, 2*time.Minute)
	if log := agentLog(); !strings.Contains(log, `"msg":"configured"`) || !strings.Contains(log, `"runtime":"containerd"`) ||
		!strings.Contains(log, `device plugin registered with the kubelet`) {
		t.Fatalf("agent %s: no NRI configuration from containerd or no device plugin registration in its log:\n%s", agentPod, log)
	}
	waitFor(t, time.Minute, "the node advertising 8 units of gpuext.io/gpu-memory", func() bool {
		out, _ := c.KubectlErr("get", "node", k8slab.Node, "-o", `jsonpath={.status.allocatable.gpuext\.io/gpu-memory}`)
		return out == "8"
	})

	// a: 4 GiB asked, best-effort by annotation; b: 4 GiB asked, lowered to
	// 2 GiB by annotation. Both fit the 8 GiB.
	c.Apply(t, k8sGPUPod("gpu-a", 4, map[string]string{"priority.gpuext.io": "best-effort"}))
	c.Apply(t, k8sGPUPod("gpu-b", 4, map[string]string{"quota.gpuext.io": "2GiB"}))
	a, b := k8sRunning(t, c, "gpu-a"), k8sRunning(t, c, "gpu-b")
	const gib = uint64(1) << 30
	tenants, _ := k8sTenants(t, pinDir)
	for _, want := range []struct {
		ctr      k8sGPUContainer
		quota    uint64
		priority string
	}{{a, 4 * gib, "best-effort"}, {b, 2 * gib, "standard"}} {
		ctr := want.ctr
		tn, ok := tenants[ctr.id]
		if !ok {
			t.Fatalf("%s (container %s) is not in the registry; agent log:\n%s", ctr.pod, ctr.id, agentLog())
		}
		if tn.Config.QuotaBytes != want.quota {
			t.Errorf("%s: registry quota %d, want %d", ctr.pod, tn.Config.QuotaBytes, want.quota)
		}
		if ino := k8sCgroupInode(t, ctr); uint64(tn.Cgroups[0].CgroupID) != ino {
			t.Errorf("%s: registry cgroup id %d, want the inode %d of its cgroup", ctr.pod, tn.Cgroups[0].CgroupID, ino)
		}
		var cfg struct {
			QuotaBytes    uint64   `json:"quotaBytes"`
			GPUQuotaBytes []uint64 `json:"gpuQuotaBytes"`
			PriorityClass string   `json:"priorityClass"`
		}
		tenantCfg := filepath.Join(stateDir, "tenants", fmt.Sprint(tn.ID), "config.json")
		if err := json.Unmarshal([]byte(readFile(tenantCfg)), &cfg); err != nil {
			t.Fatalf("%s: tenant config %s: %v", ctr.pod, tenantCfg, err)
		}
		if cfg.QuotaBytes != want.quota || len(cfg.GPUQuotaBytes) != 1 || cfg.GPUQuotaBytes[0] != want.quota || cfg.PriorityClass != want.priority {
			t.Errorf("%s: tenant config quota %d, per GPU %v, priority %q; want %d on GPU 0, %q", ctr.pod, cfg.QuotaBytes, cfg.GPUQuotaBytes, cfg.PriorityClass, want.quota, want.priority)
		}
		for k, v := range map[string]string{
			admission.EnvTenantID: fmt.Sprint(tn.ID), "CUDA_VISIBLE_DEVICES": "0",
			"LD_PRELOAD": admission.ContainerDevrtDir + "/" + admission.DevrtLibrary,
		} {
			if ctr.env[k] != v {
				t.Errorf("%s saw %s=%q, want %q", ctr.pod, k, ctr.env[k], v)
			}
		}
		mounts := sectionOf(ctr.output, "== mounts")
		for _, dir := range []string{admission.ContainerDevrtDir, admission.ContainerTenantDir, admission.ContainerBoardDir} {
			if !mountedWith(mounts, dir, "ro") {
				t.Errorf("%s: %s is not a read-only mount:\n%s", ctr.pod, dir, mounts)
			}
		}
		if !mountedWith(mounts, admission.ContainerAcctDir, "rw") {
			t.Errorf("%s: %s is not a writable mount:\n%s", ctr.pod, admission.ContainerAcctDir, mounts)
		}
	}

	// c asks for 2 of the 0 units left: the scheduler says why it waits.
	c.Apply(t, k8sGPUPod("gpu-c", 2, nil))
	waitFor(t, time.Minute, "gpu-c's FailedScheduling event", func() bool {
		return strings.Contains(c.Events(t, "default", "gpu-c"), "Insufficient gpuext.io/gpu-memory")
	})
	if phase := c.K(t, "-n", "default", "get", "pod", "gpu-c", "-o", "jsonpath={.status.phase}"); phase != "Pending" {
		t.Fatalf("gpu-c: phase %s, want Pending while 8 of 8 units are taken", phase)
	}

	// Deleting a removes its tenant; the scheduler then places c.
	aTenant := tenants[a.id]
	c.K(t, "-n", "default", "delete", "pod", "gpu-a", "--wait=true", "--timeout=60s")
	waitFor(t, 30*time.Second, "gpu-a's tenant gone", func() bool {
		now, _ := k8sTenants(t, pinDir)
		_, left := now[a.id]
		_, err := os.Stat(filepath.Join(stateDir, "tenants", fmt.Sprint(aTenant.ID)))
		return !left && os.IsNotExist(err)
	})
	cc := k8sRunning(t, c, "gpu-c")

	// The agent's pod deleted: the DaemonSet starts another, which keeps the
	// tenants of b and c (same ids), each once, and has no other.
	before, _ := k8sTenants(t, pinDir)
	c.K(t, "-n", "gpuext-system", "delete", "pod", agentPod, "--wait=true", "--timeout=60s")
	var newAgent string
	waitFor(t, 2*time.Minute, "a new agent pod", func() bool {
		newAgent, _ = c.KubectlErr("-n", "gpuext-system", "get", "pods", "-o", "jsonpath={.items[*].metadata.name}")
		return newAgent != "" && newAgent != agentPod && !strings.Contains(newAgent, " ")
	})
	c.WaitFor(t, "gpuext-system", "condition=Ready", "pod/"+newAgent, 2*time.Minute)
	newAgentID := strings.TrimPrefix(c.K(t, "-n", "gpuext-system", "get", "pod", newAgent, "-o",
		"jsonpath={.status.containerStatuses[0].containerID}"), "containerd://")
	waitFor(t, 30*time.Second, "the new agent's synchronize", func() bool { return strings.Contains(agentLog(), `"msg":"synchronized"`) })
	after, count := k8sTenants(t, pinDir)
	for _, ctr := range []k8sGPUContainer{b, cc} {
		if after[ctr.id].ID != before[ctr.id].ID || count[ctr.id] != 1 {
			t.Errorf("%s after the agent's restart: tenant %d with %d registry entries, want tenant %d once", ctr.pod, after[ctr.id].ID, count[ctr.id], before[ctr.id].ID)
		}
	}
	for id := range after {
		if id != b.id && id != cc.id && id != newAgentID {
			t.Errorf("after the agent's restart the registry has container %s, which is none of gpu-b, gpu-c and the new agent %s", id, newAgent)
		}
	}

	// helm uninstall: no pinned map, no tenant dir; b and c keep running.
	if out, err := c.HelmErr("uninstall", "gpuext", "-n", "gpuext-system", "--wait", "--timeout", "2m"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	uninstalled = true
	waitFor(t, time.Minute, "the agent pod gone", func() bool {
		out, _ := c.KubectlErr("-n", "gpuext-system", "get", "pods", "-o", "name")
		return strings.TrimSpace(out) == ""
	})
	waitFor(t, 30*time.Second, "no pinned map and no tenant dir", func() bool {
		pins, _ := os.ReadDir(pinDir)
		tenantDirs, _ := os.ReadDir(filepath.Join(stateDir, "tenants"))
		return len(pins) == 0 && len(tenantDirs) == 0
	})
	for _, ctr := range []k8sGPUContainer{b, cc} {
		got := c.K(t, "-n", "default", "get", "pod", ctr.pod, "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].containerID} {.status.containerStatuses[0].restartCount}")
		if got != "Running containerd://"+ctr.id+" 0" {
			t.Errorf("%s after helm uninstall: %q, want its container %s still running, not restarted", ctr.pod, got, ctr.id)
		}
		if _, err := c.KubectlErr("-n", "default", "exec", ctr.pod, "--", "true"); err != nil {
			t.Errorf("%s after helm uninstall: exec: %v", ctr.pod, err)
		}
	}
}

// k8sMountBPFFS mounts a bpf filesystem at /sys/fs/bpf when the node has
// none, until the test ends.
func k8sMountBPFFS(t *testing.T) {
	t.Helper()
	if !k8sIsBPFFS("/sys/fs/bpf") {
		if err := syscall.Mount("bpf", "/sys/fs/bpf", "bpf", 0, ""); err != nil {
			t.Fatalf("mount bpffs: %v", err)
		}
		t.Cleanup(func() { _ = syscall.Unmount("/sys/fs/bpf", 0) })
	}
}

// k8sIsBPFFS: dir is the root of a bpf filesystem.
func k8sIsBPFFS(dir string) bool {
	var st syscall.Statfs_t
	return syscall.Statfs(dir, &st) == nil && st.Type == 0xcafe4a11 // BPF_FS_MAGIC
}

// k8sWorkDirs is what a Kubernetes-lab test starts from: root, the node's
// bpffs, a work dir (its tenants' accounting dirs unmounted and it removed
// at the end) and a pin dir of its own (removed at the end).
func k8sWorkDirs(t *testing.T, name string) (work, pinDir string) {
	t.Helper()
	testutil.RequireRoot(t)
	k8sMountBPFFS(t)
	work, err := os.MkdirTemp("", "gpuext-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	testutil.UnmountUnder(t, work) // the tenants' accounting dirs, before the removal
	pinDir = fmt.Sprintf("/sys/fs/bpf/gpuext-%s-%d", name, time.Now().UnixNano())
	t.Cleanup(func() { os.RemoveAll(pinDir) })
	return work, pinDir
}
