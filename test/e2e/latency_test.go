package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/board"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/internal/admission"
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
//
// The node has an MPS control daemon's pipe directory (a listening socket
// here: admission and the interposer only check it is there), so the
// best-effort contexts are MPS clients: each is made with the share the
// controller publishes when that is below its policy's, a best-effort
// policy with no share of its own gets the controller's, and every one of
// them the lowest client priority, as the context itself reads them.
func TestContainerdLatencyTargetThroughAdmission(t *testing.T) {
	mpsDir, err := os.MkdirTemp("", "gpuext-mps-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(mpsDir) })
	mps, err := net.Listen("unix", filepath.Join(mpsDir, admission.MPSClientSocket))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mps.Close() })
	catalog := t.TempDir() // a best-effort policy that sets no share
	if err := os.WriteFile(filepath.Join(catalog, "scavenger.json"),
		[]byte(`{"name": "scavenger", "description": "best-effort with no share of its own",
			"memory": {"eviction": {"name": "lru"}, "prefetch": {"name": "tree-threshold", "params": {"threshold": 51}}},
			"priority": {"class": "best-effort"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	l := startCtdLab(t, "fail-open", map[string]string{"mpsPipeDirectory": mpsDir, "catalogDir": catalog})
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
		spec := appSpec(pod, "server", payload, steps...)
		spec["envs"] = []map[string]string{{"key": "FAKECUDA_SYNC_US", "value": "3000"}}
		server := pod.createStart(t, "server", spec)
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
	if !strings.Contains(string(out), "\nlatency control: 1 target; best-effort budget 60% of the SMs\n") {
		t.Errorf("gpuextctl tenants: no line for the node's latency control (one target, the budget):\n%s", out)
	}

	// a best-effort tenant on the node: the budget's share for its contexts
	// (its context takes its policy's 40%: the budget over one tenant is more)
	mpsEnv := []string{"env", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "env", "CUDA_MPS_CLIENT_PRIORITY"}
	trainSteps := append(append([]string{"alloc", "1MiB"}, mpsEnv...), "launch", "1", "hold")
	be := l.runPod(t, "train", map[string]string{"policy.gpuext.io/pod": "batch"})
	trainer := be.runApp(t, "trainer", payload, trainSteps...)
	checkMPS(t, be.waitLines(t, trainer, 5), "batch trainer, budget 60 over one tenant", "40", "1")
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

	// A second best-effort tenant, whose policy sets no share: admitted
	// (created, not yet started), it halves each tenant's part of the
	// budget; its context, started then, takes the controller's share and
	// the lowest priority. So does a batch trainer's context made after it,
	// below its policy's 40%. (The budget may grow by a step while the
	// targets hold with room and a context starts: the share is the one
	// published just before the context or just after.)
	shareNow := func(beTenants int) (uint32, bool) {
		s, err := latency.ReadStatus(statusPath, time.Now())
		if err != nil || s == nil {
			return 0, false
		}
		n := 0
		for _, ts := range s.Tenants {
			if ts.Class == tenantcfg.ClassBestEffort {
				n++
			}
		}
		return s.SMPercent, n == beTenants && s.SMPercent == uint32(s.Budget/float64(beTenants))
	}
	startBE := func(pod *ctdPod, id, what string) {
		t.Helper()
		var before uint32
		waitFor(t, 10*time.Second, "the budget split over two best-effort tenants", func() bool {
			var ok bool
			before, ok = shareNow(2)
			return ok
		})
		l.Crictl(t, "start", id)
		lines := pod.waitLines(t, id, 5)
		after, _ := shareNow(2)
		if before >= 40 || after >= 40 {
			t.Fatalf("%s: the controller's share %d..%d, want it below the batch policy's 40%% (the budget over two tenants)", what, before, after)
		}
		got := "none"
		for _, line := range lines {
			if v, ok := strings.CutPrefix(line, "env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="); ok {
				got = v
			}
		}
		if got != fmt.Sprint(before) && got != fmt.Sprint(after) {
			t.Errorf("%s: its context's share %s, want the controller's (%d, or %d just after)", what, got, before, after)
		}
		checkMPS(t, lines, what, got, "1")
	}
	scav := l.runPod(t, "scavenge", map[string]string{"policy.gpuext.io/pod": "scavenger"})
	startBE(scav, scav.mustCreate(t, "scavenger", appSpec(scav, "scavenger", payload, trainSteps...)), "best-effort policy with no share")
	startBE(be, be.mustCreate(t, "trainer2", appSpec(be, "trainer2", payload, trainSteps...)), "batch trainer beside another best-effort tenant")
}

// checkMPS finds the MPS share and client priority a best-effort context
// was made with in its app's "env" lines.
func checkMPS(t *testing.T, lines []string, what, share, prio string) {
	t.Helper()
	out := strings.Join(lines, "\n")
	for _, want := range []string{"env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=" + share, "env CUDA_MPS_CLIENT_PRIORITY=" + prio} {
		if !slices.Contains(lines, want) {
			t.Errorf("%s: no line %q in its output:\n%s", what, want, out)
		}
	}
}
