package e2e

// The memory guard in real containers: a tenant's process that unsets
// LD_PRELOAD (so the interposer never sees its allocations) and allocates
// past its quota is stopped by the agent, which reads the driver's own
// per-process figure (NVML through gpuext-gpuview --watch). The "driver" is
// the fake libcuda, which records each process's memory where the fake
// libnvidia-ml reads it, as the real driver does whether or not the
// interposer is loaded; the same escapes run against the real driver in
// make gpu-test's memguard section.

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/lib/testutil"
)

// guardLab starts the containerd lab with the agent's gpuext-gpuview over
// the fake NVML, whose processes are those the fake libcuda records in the
// returned ledger dir (mounted into containers at /ledger).
func guardLab(t *testing.T) (*ctdLab, string) {
	t.Helper()
	wrapper, ledger := fakeGuardGpuview(t)
	return startCtdLab(t, "fail-open", map[string]string{"gpuview": wrapper}), ledger
}

// fakeGuardGpuview builds gpuext-gpuview over the fake NVML and returns a
// wrapper script to give the agent as its gpuview, which lists the
// processes the fake libcuda records in the returned ledger dir (each with
// 256 MiB of driver context).
func fakeGuardGpuview(t *testing.T) (wrapper, ledger string) {
	t.Helper()
	bin, fake := testutil.BuildGpuviewOverFake(t)
	ledger, err := os.MkdirTemp("", "gpuext-ledger-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ledger) })
	wrapper = filepath.Join(t.TempDir(), "gpuview-fake.sh") // beside no other test's: the build is shared
	script := fmt.Sprintf("#!/bin/sh\nexport LD_LIBRARY_PATH=%s FAKENVML_LEDGER_DIR=%s FAKENVML_CONTEXT_BYTES=%d\nexec %s \"$@\"\n",
		fake, ledger, 256<<20, bin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper, ledger
}

// runEscaper starts a container that runs the test app with LD_PRELOAD
// unset (the interposer never loads) and the fake driver's ledger on; with
// a termination-message file mounted where Kubernetes mounts it.
func (p *ctdPod) runEscaper(t *testing.T, name, payload, ledger, termLog string, steps ...string) string {
	t.Helper()
	cmd := append([]string{"/usr/bin/env", "-u", "LD_PRELOAD", "FAKECUDA_LEDGER_DIR=/ledger",
		"/payload/ld-linux-x86-64.so.2", "--library-path", "/payload", "/payload/app_procaddr"}, steps...)
	spec := map[string]any{
		"metadata": map[string]any{"name": name},
		"image":    map[string]any{"image": p.l.image},
		"command":  cmd,
		"mounts": []map[string]any{
			{"container_path": "/payload", "host_path": payload, "readonly": true},
			{"container_path": "/ledger", "host_path": ledger},
			{"container_path": "/dev/termination-log", "host_path": termLog},
		},
		"linux":    map[string]any{"security_context": map[string]any{"namespace_options": map[string]any{"network": 2, "pid": 2}}},
		"log_path": name + ".log",
	}
	return p.createStart(t, name, spec)
}

// exitCode is a container's state and exit code (crictl inspect).
func (p *ctdPod) exitCode(t *testing.T, id string) (state string, code int) {
	out := p.l.Crictl(t, "inspect", "-o", "go-template", "--template", "{{.status.state}} {{.status.exitCode}}", id)
	if _, err := fmt.Sscan(strings.TrimSpace(out), &state, &code); err != nil {
		t.Fatalf("crictl inspect %s: %q: %v", id, out, err)
	}
	return state, code
}

// TestContainerdMemoryGuardStopsATenantThatBypassesTheInterposer: two
// tenants with 4 GiB quotas. One container unsets LD_PRELOAD and takes
// 8 GiB (8448 MiB with the fake driver's 256 MiB of context): the agent
// stops it (SIGKILL: exit 137) and says why in its
// termination message; a container of the other tenant that also bypasses
// the interposer but stays within 4 GiB (plus the context margin) runs on,
// and so does a process in no tenant holding more than either.
func TestContainerdMemoryGuardStopsATenantThatBypassesTheInterposer(t *testing.T) {
	l, ledger := guardLab(t)
	payload := payloadDir(t, l)
	quota := map[string]string{"policy.gpuext.io": "quota", "quota.gpuext.io": "4GiB"}
	term := func(name string) string {
		f := filepath.Join(l.work, name+".termination-log")
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}

	// a host process in no tenant holding 20 GiB: never the guard's business
	fake := filepath.Join(testutil.BuildDevrt(t), "fake")
	host := exec.Command(filepath.Join(fake, "app_procaddr"), "alloc", "20GiB", "hold")
	host.Env = append(os.Environ(), "LD_LIBRARY_PATH="+fake, "FAKECUDA_LEDGER_DIR="+ledger)
	hostOut, _ := host.StdoutPipe()
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Process.Kill(); host.Wait() })
	if line, _ := readLineTimeout(hostOut, 10*time.Second); line != fmt.Sprintf("alloc %d ok", 20<<30) {
		t.Fatalf("host process: %q", line)
	}

	good := l.runPod(t, "within", quota, hostPID)
	goodLog := term("within")
	within := good.runEscaper(t, "within", payload, ledger, goodLog, "alloc", "3GiB", "hold")
	if got := good.waitLines(t, within, 2); got[0] != fmt.Sprintf("alloc %d ok", 3<<30) {
		t.Fatalf("within-quota container printed %q", got)
	}

	bad := l.runPod(t, "escape", quota, hostPID)
	badLog := term("escape")
	start := time.Now()
	escaper := bad.runEscaper(t, "escape", payload, ledger, badLog, "alloc", "4GiB", "alloc", "4GiB", "hold")
	// the fake driver lets it have 8 GiB: the interposer is not there to refuse
	if got := bad.waitLines(t, escaper, 3); got[1] != fmt.Sprintf("alloc %d ok", 4<<30) {
		t.Fatalf("escaping container printed %q", got)
	}
	var state string
	var code int
	waitFor(t, 20*time.Second, "the escaping container stopped", func() bool {
		state, code = bad.exitCode(t, escaper)
		return state == "CONTAINER_EXITED"
	})
	t.Logf("stopped %v after its start (state %s, exit %d)", time.Since(start).Round(time.Millisecond), state, code)
	if code != 137 {
		t.Fatalf("escaping container exit code %d, want 137 (SIGKILL)\nplugin log:\n%s", code, readFile(l.logFile))
	}
	msg := readFile(badLog)
	for _, want := range []string{"gpuext memory guard", "stopped (SIGKILL)", "held 8448MiB of GPU 0", "quota of 4GiB"} {
		if !strings.Contains(msg, want) {
			t.Errorf("termination message %q lacks %q", msg, want)
		}
	}
	log := readFile(l.logFile)
	if !strings.Contains(log, "process stopped (SIGKILL)") || !strings.Contains(log, `"quotaBytes":4294967296`) {
		t.Errorf("no kill log line with its fields:\n%s", log)
	}

	// the other tenant's container and the host process run on
	time.Sleep(2 * time.Second) // four more samples
	if state, _ := good.exitCode(t, within); state != "CONTAINER_RUNNING" {
		t.Fatalf("within-quota container is %s\nplugin log:\n%s", state, readFile(l.logFile))
	}
	if readFile(goodLog) != "" {
		t.Errorf("within-quota container got a termination message: %q", readFile(goodLog))
	}
	if host.ProcessState != nil {
		t.Fatal("the untracked host process was stopped")
	}
}

// readLineTimeout reads one line of r within d.
func readLineTimeout(r io.Reader, d time.Duration) (string, error) {
	ch := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		ch <- strings.TrimSpace(line)
	}()
	select {
	case line := <-ch:
		return line, nil
	case <-time.After(d):
		return "", fmt.Errorf("no line within %s", d)
	}
}
