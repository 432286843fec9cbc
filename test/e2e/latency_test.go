package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/board"
	"github.com/gpuext/gpuext/internal/latency"
)

// TestContainerdLatencyTargetThroughAdmission: the latency controller as
// the agent runs it, fed through admission. A container admitted with the
// built-in latency-critical policy (latencyTarget 1.5x) serves requests
// whose wait for the GPU takes 3 ms (the fake libcuda's cuCtxSynchronize);
// with no best-effort process on the node the agent learns its solo
// p99, judges the target met and `gpuextctl tenants` shows it in the
// LATENCY column. A best-effort container admitted next (policy batch) is
// counted: the share published for new best-effort contexts is the whole
// budget (60%) split over one tenant. A second latency-critical container
// admitted while the trainer lives is never alone: the agent holds the
// best-effort launches to measure it alone, says so in its status, and
// learns its solo p99 from the held intervals.
func TestContainerdLatencyTargetThroughAdmission(t *testing.T) {
	l := startCtdLab(t, "fail-open")
	payload := payloadDir(t, l)
	ctl := buildCtl(t, l.work)
	steps := []string{"alloc", "1MiB"} // a process counts as live from its first allocation (its usage-file slot)
	for i := 0; i < 600; i++ {         // about 8 s of requests: a launch, a 3 ms wait, 10 ms apart
		steps = append(steps, "launch", "1", "sync", "sleep", "10")
	}
	steps = append(steps, "hold")
	serve := func(podName string) bpf.Tenant {
		t.Helper()
		pod := l.runPod(t, podName, map[string]string{"policy.gpuext.io/pod": "latency-critical"})
		server := pod.createStart(t, "server", map[string]any{
			"metadata": map[string]any{"name": "server"},
			"image":    map[string]any{"image": l.image},
			"command":  append([]string{"/payload/ld-linux-x86-64.so.2", "--library-path", "/payload", "/payload/app_procaddr"}, steps...),
			"envs":     []map[string]string{{"key": "FAKECUDA_SYNC_US", "value": "3000"}},
			"mounts":   []map[string]any{{"container_path": "/payload", "host_path": payload, "readonly": true}},
			"log_path": "server.log",
		})
		tn, _, ok := tenantOf(t, l.registry(t), server)
		if !ok {
			t.Fatalf("container %s is not in the registry", server)
		}
		return tn
	}
	tn := serve("serve")
	statusPath := latency.StatusPath(l.stateDir)
	var lc *latency.TenantStatus
	var st *latency.Status
	waitFor(t, 30*time.Second, "the controller's verdict on the latency-critical tenant", func() bool {
		s, err := latency.ReadStatus(statusPath, time.Now())
		if err != nil || s == nil {
			return false
		}
		st, lc = s, s.Tenant(tn.ID)
		return lc != nil && lc.Verdict == latency.Met
	})
	if lc.Target != "1.5x" || lc.SoloP99 < 3*time.Millisecond || lc.SoloP99 > 5*time.Millisecond || lc.Processes != 1 {
		t.Fatalf("latency-critical tenant %+v: want target 1.5x from the catalog, a solo p99 of about 3 ms (its requests' wait), one process", lc)
	}
	if st.Targets != 1 || st.Pace != 0 {
		t.Errorf("status %+v: want one target on the node and no pacing (the target holds)", st)
	}

	// the tenant table an operator reads
	cfg := filepath.Join(l.PluginConfigDir, "50-gpuext.conf")
	out, err := exec.Command(ctl, "--config", cfg, "tenants").CombinedOutput()
	if err != nil {
		t.Fatalf("gpuextctl tenants: %v\n%s", err, out)
	}
	row := ""
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, fmt.Sprintf("%d ", tn.ID)) {
			row = line
		}
	}
	if !strings.Contains(string(out), "LATENCY") || !strings.Contains(row, ": met") {
		t.Errorf("gpuextctl tenants: the latency-critical tenant's row %q does not say its target is met:\n%s", row, out)
	}

	// a best-effort tenant on the node: the budget's share for its contexts
	be := l.runPod(t, "train", map[string]string{"policy.gpuext.io/pod": "batch"})
	trainer := be.runApp(t, "trainer", payload, "alloc", "1MiB", "launch", "1", "hold")
	be.waitLines(t, trainer, 3)
	waitFor(t, 10*time.Second, "the share for new best-effort contexts", func() bool {
		s, err := latency.ReadStatus(statusPath, time.Now())
		return err == nil && s != nil && s.SMPercent == 60
	})

	// a latency-critical container that starts beside the trainer: never
	// alone, so measured alone under a hold of the best-effort launches
	tn2 := serve("serve-busy")
	held := false
	waitFor(t, 30*time.Second, "the second latency-critical tenant's solo base, measured under a hold", func() bool {
		s, err := latency.ReadStatus(statusPath, time.Now())
		if err != nil || s == nil {
			return false
		}
		lc = s.Tenant(tn2.ID)
		if s.HoldTenant == tn2.ID && lc != nil && lc.MeasuringAlone {
			held = true
		}
		return lc != nil && lc.SoloP99 > 0
	})
	if !held {
		t.Errorf("the second latency-critical tenant got its solo base %v without a hold seen in the status", lc.SoloP99)
	}
	if lc.SoloP99 < 3*time.Millisecond || lc.SoloP99 > 5*time.Millisecond {
		t.Errorf("solo p99 measured under the hold %v, want about 3 ms (its requests' wait)", lc.SoloP99)
	}
	waitFor(t, 10*time.Second, "the hold's end", func() bool {
		s, err := latency.ReadStatus(statusPath, time.Now())
		return err == nil && s != nil && s.HoldTenant == 0 && s.Pace != board.PaceHold
	})
}
