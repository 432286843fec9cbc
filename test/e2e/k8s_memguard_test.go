package e2e

// The memory guard on a real Kubernetes node (test/k8s): what the user sees
// of a stop is the pod's status, so the kubelet must read the reason the
// agent wrote into the container's termination-message file.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuext/gpuext/lib/testutil"
	"github.com/gpuext/gpuext/test/k8s/k8slab"
)

// k8sHostAgent runs the agent on the node as deploy/systemd's
// gpuext-nri.service does: an external NRI plugin of the cluster's
// containerd, with cfg over the lab's paths. It returns the agent's log
// file once containerd has configured it; the agent stops in t.Cleanup.
func k8sHostAgent(t *testing.T, c *k8slab.Cluster, work string, cfg map[string]string) string {
	t.Helper()
	bin := filepath.Join(work, "gpuext-nri-plugin")
	build := exec.Command("go", "build", "-o", bin, "./nri-plugin")
	build.Dir, build.Env = testutil.RepoRoot(), append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the agent: %v\n%s", err, out)
	}
	logFile := filepath.Join(work, "agent.log")
	cfg["logFile"], cfg["logLevel"] = logFile, "debug"
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(work, "config.json")
	if err := os.WriteFile(cfgFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	agent := exec.Command(bin, "--config", cfgFile, "--socket", c.NRISocket, "--idx", "50")
	agent.Stdout, agent.Stderr = os.Stderr, os.Stderr
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = agent.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = agent.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = agent.Process.Kill()
			<-done
		}
	})
	waitFor(t, 20*time.Second, "the agent configured by the cluster's containerd", func() bool {
		return strings.Contains(readFile(logFile), `"msg":"configured"`)
	})
	return logFile
}

// k8sEscaperPod is a host-PID, host-network pod of tenant policy quota
// (4 GiB) whose container runs the fake-CUDA test app with LD_PRELOAD unset,
// so the device runtime never sees its allocations, and the fake driver's
// ledger on; payload and ledger are host dirs (hostPath volumes).
func k8sEscaperPod(name, restartPolicy, payload, ledger string, steps ...string) string {
	cmd, _ := json.Marshal(append([]string{"/usr/bin/env", "-u", "LD_PRELOAD", "FAKECUDA_LEDGER_DIR=/ledger",
		"/payload/ld-linux-x86-64.so.2", "--library-path", "/payload", "/payload/app_procaddr"}, steps...))
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: default
  annotations:
    policy.gpuext.io: quota
    quota.gpuext.io: 4GiB
spec:
  hostNetwork: true
  hostPID: true
  restartPolicy: %s
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: %s
    imagePullPolicy: Never
    command: %s
    volumeMounts:
    - {name: payload, mountPath: /payload, readOnly: true}
    - {name: ledger, mountPath: /ledger}
  volumes:
  - {name: payload, hostPath: {path: %q, type: Directory}}
  - {name: ledger, hostPath: {path: %q, type: Directory}}
`, name, restartPolicy, k8slab.Image, cmd, payload, ledger)
}

// TestK8sMemoryGuardTerminationMessage: issue 30's memory guard seen
// through the Kubernetes API. Pods of their own tenants with 4 GiB quotas
// (annotations), all in the host pid namespace, as NVML's pids are the
// node's; each bypasses the device runtime. The one that takes 8 GiB is
// stopped by the agent (the fake driver's ledger, read through the fake NVML
// by the agent's gpuext-gpuview): its container's status is terminated with
// exit code 137 and the guard's reason as its message, which `kubectl
// describe pod` shows under State; a third pod, which restarts its
// container (OnFailure), shows the same stop under Last State; the pod
// holding 3 GiB keeps running.
func TestK8sMemoryGuardTerminationMessage(t *testing.T) {
	work, pinDir := k8sWorkDirs(t, "k8sguard")

	devrt := installDevrt(t, filepath.Join(work, "devrt"))
	payload := payloadDirIn(t, work)
	gpuview, ledger := fakeGuardGpuview(t)
	c := k8slab.Start(t, k8slab.Options{})
	agentLog := k8sHostAgent(t, c, work, map[string]string{
		"failMode": "fail-open", "pinDir": pinDir, "stateDir": filepath.Join(work, "state"), "devrtDir": devrt,
		"agentSocket": filepath.Join(work, "sock", "agent.sock"), "gpuview": gpuview,
	})
	status := func(pod, jsonpath string) string {
		out, _ := c.KubectlErr("-n", "default", "get", "pod", pod, "-o", "jsonpath="+jsonpath)
		return out
	}

	c.Apply(t, k8sEscaperPod("within", "Never", payload, ledger, "alloc", "3GiB", "hold"))
	waitFor(t, 2*time.Minute, "pod within holding 3 GiB", func() bool {
		out, err := c.KubectlErr("-n", "default", "logs", "within")
		return err == nil && strings.Contains(out, fmt.Sprintf("alloc %d ok", 3<<30))
	})

	c.Apply(t, k8sEscaperPod("escape", "Never", payload, ledger, "alloc", "4GiB", "alloc", "4GiB", "hold"))
	// the same escape in a pod that restarts its container: the stop is its Last State
	c.Apply(t, k8sEscaperPod("restarts", "OnFailure", payload, ledger, "alloc", "4GiB", "alloc", "4GiB", "hold"))
	waitFor(t, 2*time.Minute, "pod escape stopped", func() bool {
		return status("escape", "{.status.phase}") == "Failed"
	})
	// The fake driver gave it its 8 GiB: the device runtime was not there to refuse.
	if out := c.K(t, "-n", "default", "logs", "escape"); !strings.Contains(out, fmt.Sprintf("alloc %d ok\nalloc %d ok", 4<<30, 4<<30)) {
		t.Fatalf("pod escape's log %q: want two allocations of 4 GiB before its stop", out)
	}
	const term = "{.status.containerStatuses[0].state.terminated"
	if code := status("escape", term+".exitCode}"); code != "137" {
		t.Fatalf("pod escape: exit code %q, want 137 (SIGKILL)\n%s\nagent log:\n%s", code,
			c.K(t, "-n", "default", "describe", "pod", "escape"), readFile(agentLog))
	}
	msg := status("escape", term+".message}")
	for _, want := range []string{"gpuext memory guard", "stopped (SIGKILL)", "held 8448MiB of GPU 0", "quota of 4GiB"} {
		if !strings.Contains(msg, want) {
			t.Errorf("pod escape: terminated message %q lacks %q", msg, want)
		}
	}
	desc := c.K(t, "-n", "default", "describe", "pod", "escape")
	if !strings.Contains(desc, "Message:") || !strings.Contains(desc, "gpuext memory guard: process") {
		t.Errorf("kubectl describe pod escape shows no Message with the guard's reason:\n%s", desc)
	}
	if i := strings.Index(desc, "    State:"); i >= 0 {
		state, _, _ := strings.Cut(desc[i:], "    Ready:")
		t.Logf("kubectl describe pod escape:\n%s", state)
	}

	// Restarted after the stop, the other pod shows it as its Last State.
	const last = "{.status.containerStatuses[0].lastState.terminated"
	waitFor(t, 2*time.Minute, "pod restarts restarted after a stop", func() bool {
		return status("restarts", last+".exitCode}") == "137"
	})
	if msg := status("restarts", last+".message}"); !strings.Contains(msg, "gpuext memory guard") || !strings.Contains(msg, "quota of 4GiB") {
		t.Errorf("pod restarts: last state's message %q, want the guard's reason with the quota", msg)
	}
	desc = c.K(t, "-n", "default", "describe", "pod", "restarts")
	if i := strings.Index(desc, "    Last State:"); i < 0 || !strings.Contains(desc[i:], "gpuext memory guard: process") {
		t.Errorf("kubectl describe pod restarts shows no Last State with the guard's reason:\n%s", desc)
	}

	// The agent logged its kills, none of pod within's container, each with
	// the quota.
	withinID := strings.TrimPrefix(status("within", "{.status.containerStatuses[0].containerID}"), "containerd://")
	escapeID := strings.TrimPrefix(status("escape", "{.status.containerStatuses[0].containerID}"), "containerd://")
	if withinID == "" {
		t.Fatalf("pod within has no container id: %s", c.K(t, "-n", "default", "describe", "pod", "within"))
	}
	kills, escapeKilled := 0, false
	for _, line := range strings.Split(readFile(agentLog), "\n") {
		if !strings.Contains(line, "process stopped (SIGKILL)") {
			continue
		}
		kills++
		escapeKilled = escapeKilled || strings.Contains(line, escapeID)
		if strings.Contains(line, withinID) || !strings.Contains(line, `"quotaBytes":4294967296`) {
			t.Errorf("a kill of pod within's container %s, or without the 4 GiB quota: %s", withinID, line)
		}
	}
	if kills == 0 || !escapeKilled {
		t.Errorf("no kill line for pod escape's container %s in the agent's log:\n%s", escapeID, readFile(agentLog))
	}

	// The other tenant, within its quota, runs on.
	time.Sleep(2 * time.Second) // four more samples
	if got := status("within", "{.status.phase} {.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].state.running.startedAt}"); !strings.HasPrefix(got, "Running 0 ") || len(strings.Fields(got)) != 3 {
		t.Fatalf("pod within: %q, want Running, never restarted\nagent log:\n%s", got, readFile(agentLog))
	}
}
