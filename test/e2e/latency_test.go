package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
// budget (60%) split over one tenant.
func TestContainerdLatencyTargetThroughAdmission(t *testing.T) {
	l := startCtdLab(t, "fail-open")
	payload := payloadDir(t, l)
	ctl := buildCtl(t, l.work)
	pod := l.runPod(t, "serve", map[string]string{"policy.gpuext.io/pod": "latency-critical"})
	steps := []string{"alloc", "1MiB"} // a process counts as live from its first allocation (its usage-file slot)
	for i := 0; i < 600; i++ {         // about 8 s of requests: a launch, a 3 ms wait, 10 ms apart
		steps = append(steps, "launch", "1", "sync", "sleep", "10")
	}
	steps = append(steps, "hold")
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
}
