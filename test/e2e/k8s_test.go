package e2e

// A real single-node Kubernetes cluster (test/k8s/cluster.sh): etcd, the
// apiserver, controller-manager, scheduler and a kubelet on the lab's
// containerd with CRI and NRI. The tests use only kubectl and helm, as a user.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/test/k8s/k8slab"
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
