// Package k8slab starts the k8s lab's real single-node Kubernetes cluster for
// Go tests: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
// a kubelet whose runtime is the lab's containerd 2.4 with CRI and NRI
// (test/k8s/cluster.sh, over test/lab/containerd.sh).
//
// A test talks to the cluster only as a user would, through the kubectl and
// helm binaries of test/k8s/install.sh (`make deps`); client-go is no
// dependency of gpuext. Start brings a cluster up in a fresh work dir under
// /tmp and tears it down in t.Cleanup: every process stopped, every mount
// unmounted, its cgroups removed.
//
// Tests that need the cluster skip without root or without the binaries,
// except when CI=true: then they fail, so CI never passes by skipping.
package k8slab

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/lib/testutil"
	"github.com/gpuext/gpuext/test/lab"
)

// Image is the lab's busybox image, imported into the cluster's containerd
// (a pod uses it with imagePullPolicy: Never or IfNotPresent).
const Image = "localhost/gpuext-busybox:lab"

// Node is the name of the cluster's only node.
const Node = "localhost"

// ScriptsDir is test/k8s, where cluster.sh and install.sh live.
func ScriptsDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("k8slab: cannot locate source file")
	}
	return filepath.Dir(filepath.Dir(file))
}

// BinDir is where test/k8s/install.sh put gpuext-kube, its symlinks and helm.
func BinDir() string {
	if d := os.Getenv("GPUEXT_K8S_BIN"); d != "" {
		return d
	}
	return filepath.Join(testutil.RepoRoot(), ".cache", "k8s", "bin")
}

// Cluster is a running cluster started by Start. The fields are values
// `cluster.sh env` prints.
type Cluster struct {
	Dir               string // GPUEXT_K8S_DIR
	Kubeconfig        string // KUBECONFIG of the admin (system:masters)
	Kubectl           string // the kubectl binary
	Helm              string // the helm binary
	ContainerdAddress string // CONTAINERD_ADDRESS of the kubelet's containerd
	NRISocket         string // NRI_SOCKET of that containerd, for an NRI plugin
	CgroupRoot        string // the kubelet's --cgroup-root (pods are below <root>/kubepods)
	KubeletRoot       string // the kubelet's --root-dir
	LogDir            string // <component>.log of etcd and the Kubernetes components
	Env               map[string]string

	baseEnv []string
}

// Options change what Start does.
type Options struct {
	// Log receives cluster.sh's progress lines; nil: t.Log.
	Log func(format string, args ...any)
}

// Start brings a cluster up in a fresh work dir and tears it down (and
// removes the dir) in t.Cleanup. It returns when the node is Ready and the
// default namespace's service account exists. One cluster runs per host at
// a time (the kubelet's device plugin dir is fixed).
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	testutil.RequireRoot(t)
	lab.RequireBinaries(t, BinDir(), "test/k8s/install.sh", "gpuext-kube", "kubectl", "kubelet", "helm")
	lab.RequireBinaries(t, lab.BinDir(), "test/lab/install-deps.sh", "containerd", "crictl")
	dir := lab.WorkDir(t, "gpuext-k8slab-")
	c := &Cluster{Dir: dir}
	c.baseEnv = append(os.Environ(), "GPUEXT_K8S_DIR="+dir)
	out, err := c.script(context.Background(), "env")
	if err != nil {
		t.Fatalf("cluster.sh env: %v\n%s", err, out)
	}
	c.Env = lab.ParseExports(out)
	c.Kubeconfig = c.Env["KUBECONFIG"]
	c.Kubectl = c.Env["GPUEXT_K8S_KUBECTL"]
	c.Helm = c.Env["GPUEXT_K8S_HELM"]
	c.ContainerdAddress = c.Env["CONTAINERD_ADDRESS"]
	c.NRISocket = c.Env["NRI_SOCKET"]
	c.CgroupRoot = c.Env["GPUEXT_K8S_CGROUP_ROOT"]
	c.KubeletRoot = c.Env["GPUEXT_K8S_KUBELET_ROOT"]
	c.LogDir = c.Env["GPUEXT_K8S_LOG_DIR"]
	logf := opts.Log
	if logf == nil {
		logf = t.Logf
	}

	t.Cleanup(func() {
		if t.Failed() {
			for _, comp := range []string{"kubelet", "kube-apiserver", "kube-scheduler", "kube-controller-manager"} {
				t.Logf("%s log tail:\n%s", comp, c.LogTail(comp, 25))
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if out, err := c.script(ctx, "clean"); err != nil {
			t.Errorf("cluster.sh clean: %v\n%s", err, out)
		} else {
			logf("%s", strings.TrimSpace(out))
		}
		_ = os.RemoveAll(dir)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	begin := time.Now()
	out, err = c.script(ctx, "up")
	if err != nil {
		t.Fatalf("cluster.sh up: %v\n%s", err, out)
	}
	logf("%s\n(cluster up in %s)", strings.TrimSpace(out), time.Since(begin).Round(time.Second))
	return c
}

// script runs cluster.sh with this cluster's environment; its output is
// stdout and stderr together (the progress lines are on stderr).
func (c *Cluster) script(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(ScriptsDir(), "cluster.sh"), args...)
	cmd.Env = c.baseEnv
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// run runs a binary with the cluster's KUBECONFIG and helm dirs; stdout and
// stderr apart, stdin from in.
func (c *Cluster) run(ctx context.Context, in string, bin string, args ...string) (string, string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig,
		"HELM_CACHE_HOME="+c.Env["HELM_CACHE_HOME"],
		"HELM_CONFIG_HOME="+c.Env["HELM_CONFIG_HOME"],
		"HELM_DATA_HOME="+c.Env["HELM_DATA_HOME"])
	if in != "" {
		cmd.Stdin = strings.NewReader(in)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// KubectlErr runs kubectl ARGS and returns its stdout, or an error with its
// stderr, for a call that may fail.
func (c *Cluster) KubectlErr(args ...string) (string, error) {
	return c.KubectlStdinErr("", args...)
}

// KubectlStdinErr is KubectlErr with stdin (e.g. `apply -f -`).
func (c *Cluster) KubectlStdinErr(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stdout, stderr, err := c.run(ctx, stdin, c.Kubectl, args...)
	if err != nil {
		return stdout, fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr))
	}
	return stdout, nil
}

// K runs kubectl ARGS and returns its stdout; it fails the test on error.
func (c *Cluster) K(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.KubectlErr(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Apply creates or updates the objects of a YAML manifest (kubectl apply -f -).
func (c *Cluster) Apply(t testing.TB, manifest string) {
	t.Helper()
	if _, err := c.KubectlStdinErr(manifest, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
}

// HelmErr runs helm ARGS against the cluster and returns its stdout, or an
// error with its stderr.
func (c *Cluster) HelmErr(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stdout, stderr, err := c.run(ctx, "", c.Helm, args...)
	if err != nil {
		return stdout, fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr))
	}
	return stdout, nil
}

// Ctr runs ctr against the cluster's containerd (namespace k8s.io) and
// returns its output; it fails the test on error.
func (c *Cluster) Ctr(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.script(context.Background(), append([]string{"ctr"}, args...)...)
	if err != nil {
		t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// ImportImage imports an OCI or Docker image archive into the cluster's
// containerd, where the kubelet finds it without pulling.
func (c *Cluster) ImportImage(t testing.TB, tar string) {
	t.Helper()
	c.Ctr(t, "images", "import", tar)
}

// WaitFor waits until `kubectl wait --for=COND` holds for OBJ in namespace ns
// (e.g. "condition=Ready", "pod/x"), failing the test with OBJ's description
// and its events when it does not within timeout.
func (c *Cluster) WaitFor(t testing.TB, ns, cond, obj string, timeout time.Duration) {
	t.Helper()
	if _, err := c.KubectlErr("-n", ns, "wait", "--for="+cond, obj, "--timeout="+timeout.String()); err != nil {
		desc, _ := c.KubectlErr("-n", ns, "describe", obj)
		t.Fatalf("%s in namespace %s: not %s within %s: %v\n%s", obj, ns, cond, timeout, err, desc)
	}
}

// WaitDeleted waits until OBJ in namespace ns is gone.
func (c *Cluster) WaitDeleted(t testing.TB, ns, obj string, timeout time.Duration) {
	t.Helper()
	c.WaitFor(t, ns, "delete", obj, timeout)
}

// Events returns the events of the object NAME (a pod's name) in namespace
// ns, one "Reason: Message" per line, oldest first.
func (c *Cluster) Events(t testing.TB, ns, name string) string {
	t.Helper()
	return c.K(t, "-n", ns, "get", "events", "--field-selector", "involvedObject.name="+name,
		"--sort-by=.metadata.creationTimestamp", "-o", `jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}`)
}

// LogTail returns the last n lines of component's log (kubelet, etcd,
// kube-apiserver, kube-scheduler, kube-controller-manager).
func (c *Cluster) LogTail(component string, n int) string {
	return lab.Tail(filepath.Join(c.LogDir, component+".log"), n)
}
