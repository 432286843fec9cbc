package e2e

// The device runtime in real containers: containerd + the gpuext plugin
// inject the interposer, a CUDA-style app in the container runs against the
// fake libcuda (the CI machine has no GPU; the same checks run on the H200
// with real CUDA in `make gpu-test`), and the tenant's quota holds across the
// containers of a pod that share one tenant.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/lib/testutil"
)

// payloadDir holds what the test app needs inside a busybox container: the
// app, the fake libcuda, and the dynamic loader and libraries the app and the
// interposer link against (busybox images have no libc).
func payloadDir(t *testing.T, l *ctdLab) string {
	t.Helper()
	return payloadDirIn(t, l.work)
}

// payloadDirIn is payloadDir under a work dir: work/payload, from the
// device runtime's build (testutil.BuildDevrt).
func payloadDirIn(t *testing.T, work string) string {
	t.Helper()
	build := testutil.BuildDevrt(t)
	dir := filepath.Join(work, "payload")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile := func(src, name string) {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(filepath.Join(build, "fake", "app_procaddr"), "app_procaddr")
	copyFile(filepath.Join(build, "fake", "libcuda.so.1"), "libcuda.so.1")
	// The loader and every library ldd names for the app and the interposer.
	for _, bin := range []string{filepath.Join(build, "fake", "app_procaddr"), filepath.Join(build, "libgpuext-devrt.so")} {
		out, err := exec.Command("ldd", bin).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", bin, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "/") {
					copyFile(f, filepath.Base(f))
				}
			}
		}
	}
	return dir
}

// runApp starts a container in the pod that runs the app through the
// payload's loader (LD_PRELOAD comes from the injection) and returns its id.
func (p *ctdPod) runApp(t *testing.T, name, payload string, steps ...string) string {
	t.Helper()
	return p.createStart(t, name, appSpec(p, name, payload, steps...))
}

// appSpec is the CRI config of a container that runs the app's steps.
func appSpec(p *ctdPod, name, payload string, steps ...string) map[string]any {
	cmd := append([]string{"/payload/ld-linux-x86-64.so.2", "--library-path", "/payload", "/payload/app_procaddr"}, steps...)
	return map[string]any{
		"metadata": map[string]any{"name": name},
		"image":    map[string]any{"image": p.l.image},
		"command":  cmd,
		"mounts":   []map[string]any{{"container_path": "/payload", "host_path": payload, "readonly": true}},
		"log_path": name + ".log",
	}
}

// createStart creates a container in the pod from its CRI config and
// starts it; returns its id.
func (p *ctdPod) createStart(t *testing.T, name string, spec map[string]any) string {
	t.Helper()
	id := p.mustCreate(t, name, spec)
	p.l.Crictl(t, "start", id)
	return id
}

// mustCreate creates a container in the pod from its CRI config
// (admission runs here) without starting it; returns its id.
func (p *ctdPod) mustCreate(t *testing.T, name string, spec map[string]any) string {
	t.Helper()
	data, _ := json.Marshal(spec)
	id, err := p.createJSON(t, name, data)
	if err != nil {
		t.Fatalf("crictl create %s: %v\nplugin log:\n%s", name, err, readFile(p.l.logFile))
	}
	return id
}

// waitLines waits until the container printed n lines and returns them.
func (p *ctdPod) waitLines(t *testing.T, id string, n int) []string {
	t.Helper()
	var lines []string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		lines = nil
		for _, l := range strings.Split(strings.TrimSpace(p.l.Crictl(t, "logs", id)), "\n") {
			if l != "" {
				lines = append(lines, l)
			}
		}
		if len(lines) >= n {
			return lines
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("container %s printed %d lines, want %d: %q", id, len(lines), n, lines)
	return nil
}

// TestContainerdDevrtQuotaAcrossContainers: two containers of one pod share a
// tenant (tenant.gpuext.io=pod) with a 4GiB quota. The first holds 3GiB; the
// second's 2GiB allocation is refused with CUDA_ERROR_OUT_OF_MEMORY before it
// reaches the driver, 1GiB still fits, and cuMemGetInfo reports the quota.
func TestContainerdDevrtQuotaAcrossContainers(t *testing.T) {
	l := startCtdLab(t, "fail-open")
	payload := payloadDir(t, l)
	pod := l.runPod(t, "cuda", map[string]string{
		"policy.gpuext.io/pod": "quota",
		"quota.gpuext.io/pod":  "4GiB",
		"tenant.gpuext.io/pod": "pod",
	})
	holder := pod.runApp(t, "holder", payload, "alloc", "3GiB", "hold")
	if got := pod.waitLines(t, holder, 2); got[0] != fmt.Sprintf("alloc %d ok", 3<<30) || got[1] != "hold" {
		t.Fatalf("holder printed %q", got)
	}
	second := pod.runApp(t, "second", payload, "alloc", "2GiB", "alloc", "1GiB", "info")
	got := pod.waitLines(t, second, 3)
	want := []string{
		fmt.Sprintf("alloc %d CUDA_ERROR_OUT_OF_MEMORY", 2<<30),
		fmt.Sprintf("alloc %d ok", 1<<30),
		fmt.Sprintf("info free=0 total=%d", 4<<30),
	}
	if got[2], _, _ = strings.Cut(got[2], " rc="); strings.Join(got[:3], "\n") != strings.Join(want, "\n") {
		t.Fatalf("second container printed\n%s\nwant\n%s\nplugin log:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), readFile(l.logFile))
	}
}
