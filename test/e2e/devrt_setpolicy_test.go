package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestContainerdSetPolicyReachesRunningProcess: the device-runtime half of
// changing a running tenant's policy. A CUDA-style process (the fake
// libcuda under the injected interposer) in a containerd container reports
// cuMemGetInfo every 100 ms under a 2GiB quota; `gpuextctl tenants
// set-policy` through the agent's socket makes it 4GiB, and the same
// process, never restarted, reports the new total and can allocate what
// the old quota refused.
func TestContainerdSetPolicyReachesRunningProcess(t *testing.T) {
	l := startCtdLab(t, "fail-open")
	payload := payloadDir(t, l)
	ctl := buildCtl(t, l.work)
	pod := l.runPod(t, "setpol", map[string]string{"policy.gpuext.io/pod": "quota", "quota.gpuext.io/pod": "2GiB"})
	steps := []string{"alloc", "1GiB", "alloc", "2GiB", "info"}
	const rounds = 200 // 20 s of reports
	for i := 0; i < rounds; i++ {
		steps = append(steps, "sleep", "100", "info")
	}
	steps = append(steps, "alloc", "2GiB", "hold")
	id := pod.runApp(t, "app", payload, steps...)
	got := pod.waitLines(t, id, 3)
	want := []string{fmt.Sprintf("alloc %d ok", 1<<30), fmt.Sprintf("alloc %d CUDA_ERROR_OUT_OF_MEMORY", 2<<30),
		fmt.Sprintf("info free=%d total=%d", 1<<30, 2<<30)}
	if got[2], _, _ = strings.Cut(got[2], " rc="); strings.Join(got[:3], "\n") != strings.Join(want, "\n") {
		t.Fatalf("the app printed\n%s\nwant\n%s\nplugin log:\n%s", strings.Join(got[:3], "\n"), strings.Join(want, "\n"), readFile(l.logFile))
	}

	reg := l.registry(t)
	tn, _, ok := tenantOf(t, reg, id)
	if !ok {
		t.Fatalf("container %s is not in the registry", id)
	}
	socket := filepath.Join(l.work, "agent", "agent.sock")
	out, err := exec.Command(ctl, "tenants", "set-policy", tn.Key, "quota", "--param", "quota=4GiB", "--socket", socket).CombinedOutput()
	if err != nil {
		t.Fatalf("set-policy: %v\n%s\nplugin log:\n%s", err, out, readFile(l.logFile))
	}
	changed := time.Now()
	t.Logf("set-policy: %s", strings.TrimSpace(string(out)))
	if rec, err := reg.TenantRecord(tn.ID); err != nil || rec.Config.QuotaBytes != 4<<30 {
		t.Fatalf("registry right after set-policy: %v quota %d, want 4GiB", err, rec.Config.QuotaBytes)
	}

	// the running process's next reports: the new total, from the same
	// process (its first lines appear once: no restart)
	newInfo := fmt.Sprintf("info free=%d total=%d", 3<<30, 4<<30)
	var lines []string
	var seenAfter time.Duration
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		lines = nil
		for _, s := range strings.Split(strings.TrimSpace(l.Crictl(t, "logs", id)), "\n") {
			if s != "" {
				s, _, _ = strings.Cut(s, " rc=")
				lines = append(lines, s)
			}
		}
		if strings.Contains(strings.Join(lines, "\n"), newInfo) {
			seenAfter = time.Since(changed)
			break
		}
	}
	if seenAfter == 0 {
		t.Fatalf("the running process never reported the 4GiB quota; its last lines:\n%s", strings.Join(lines[max(0, len(lines)-5):], "\n"))
	}
	t.Logf("the running process reported the new quota %v after set-policy returned (it reports every 100 ms)", seenAfter.Round(10*time.Millisecond))
	if n := strings.Count(strings.Join(lines, "\n"), fmt.Sprintf("alloc %d ok", 1<<30)); n != 1 {
		t.Fatalf("the app's first allocation appears %d times: it was restarted", n)
	}
	// what the old quota refused now fits, in the same process
	final := pod.waitLines(t, id, 3+2*rounds+2)
	if tail := final[len(final)-2:]; tail[0] != fmt.Sprintf("alloc %d ok", 2<<30) || tail[1] != "hold" {
		t.Fatalf("after the change the same process's 2GiB allocation: %q, want ok then hold", tail)
	}
}
