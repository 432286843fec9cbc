package board

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/devrt/tenantcfg"
)

// A latency-critical process's requests land in its tenant's latency
// histogram as its device runtime times them (first launch after a wait to
// the wait's return): 60 requests whose wait takes 3 ms read a p99 of about
// 3 ms, and every wait counts as completed work.
func TestLatencyHistogramFromRequests(t *testing.T) {
	build := buildDevrt(t)
	state := t.TempDir()
	lc := newTenantFile(t, state, tenantcfg.File{TenantID: 1, Policy: "p", Class: "latency-critical", LatencyTarget: "1.5x"})
	cmd := exec.Command(filepath.Join(build, "fake", "gateapp"), "lcsync", "60", "4", "1000")
	cmd.Env = append(lc.env(build, filepath.Join(state, "board", FileName)), "FAKECUDA_SYNC_US=3000")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("lcsync: %v\n%s", err, out)
	}
	u, err := ReadUsage(lc.acct)
	if err != nil {
		t.Fatal(err)
	}
	// the first request has no earlier wait to start from: 59 or 60
	if u.LCRequests < 59 || u.Latency.Count() != u.LCRequests || u.Synced != 60 {
		t.Fatalf("requests %d, histogram %d, synced %d: want 59-60 requests, all in the histogram, 60 waits", u.LCRequests, u.Latency.Count(), u.Synced)
	}
	if p99 := u.Latency.Quantile(0.99); p99 < 3*time.Millisecond || p99 > 30*time.Millisecond {
		t.Errorf("p99 %v of requests whose wait takes 3 ms", p99)
	}
	if mean := u.LCRequestTime / time.Duration(u.LCRequests); mean < 3*time.Millisecond {
		t.Errorf("mean request %v, want at least the 3 ms wait", mean)
	}
	// the host's reader of settings.bin knows the target
	hosts, err := TenantSettings(filepath.Join(state, "tenants")).Tenants()
	if err != nil || hosts[1].Target.RatioMilli != 1500 {
		t.Errorf("host view of tenant 1: %+v, %v; want the 1.5x target", hosts[1], err)
	}
}

// A best-effort context created while the board carries the controller's
// share gets that share when it is below its policy's, never above, and
// the lowest MPS client priority; with no share on the board it gets the
// policy's. A best-effort policy that sets no share is confined only while
// the board carries one. (An MPS server's control pipe is a file here: the
// interposer only checks it is there.)
func TestBoardShareForNewBestEffortContexts(t *testing.T) {
	build := buildDevrt(t)
	state := t.TempDir()
	capped := newTenantFile(t, state, tenantcfg.File{TenantID: 2, Policy: "p", Class: "best-effort", SMPercent: 40, MPSClientPriority: 1})
	uncapped := newTenantFile(t, state, tenantcfg.File{TenantID: 3, Policy: "q", Class: "best-effort"})
	pipe := filepath.Join(state, "mps")
	if err := os.MkdirAll(pipe, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pipe, "control"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pub := openPublisher(t, state)
	// the share and priority a context of the tenant is created with ("-":
	// the interposer set neither)
	mps := func(tf tenant) (share, prio string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(build, "fake", "app_procaddr"), "launch", "1")
		cmd.Env = append(tf.env(build, filepath.Join(state, "board", FileName)), "GPUEXT_DEVRT_DEBUG=1", "CUDA_MPS_PIPE_DIRECTORY="+pipe)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("app: %v\n%s", err, out)
		}
		_, v, ok := strings.Cut(string(out), "best-effort under MPS: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=")
		if !ok {
			return "-", "-"
		}
		f := strings.Fields(v)
		return f[0], strings.TrimSuffix(strings.TrimPrefix(f[1], "CUDA_MPS_CLIENT_PRIORITY="), ",")
	}
	for _, tc := range []struct {
		board                          uint32
		cappedShare, openShare, openPr string
	}{{0, "40", "-", "-"}, {15, "15", "15", "1"}, {70, "40", "70", "1"}, {101, "40", "-", "-"}} {
		pub.SetControl(Control{SMPercent: tc.board})
		if got, pr := mps(capped); got != tc.cappedShare || pr != "1" {
			t.Errorf("board share %d, policy 40 at priority 1: the context got %s%% at priority %s, want %s%% at 1", tc.board, got, pr, tc.cappedShare)
		}
		if got, pr := mps(uncapped); got != tc.openShare || pr != tc.openPr {
			t.Errorf("board share %d, policy with no share: the context got %s%% at priority %s, want %s%% at %s", tc.board, got, pr, tc.openShare, tc.openPr)
		}
	}
}

// Pacing: while the board says so, a best-effort launch called during a
// latency-critical request waits for the request's end; without it, it
// goes at once; either way the best-effort process keeps launching between
// requests. Requests here take 30 ms of waiting on the GPU, 60 ms apart
// (the expected end is 1.5x the mean request: 45 ms); the best-effort
// process launches every millisecond.
func TestPacingHoldsBestEffortDuringRequests(t *testing.T) {
	build := buildDevrt(t)
	state := t.TempDir()
	lc := newTenantFile(t, state, tenantcfg.File{TenantID: 1, Policy: "p", Class: "latency-critical", ActiveWindowUS: 100000})
	// the best-effort tenant was given host GPU 1 (the device plugin's
	// gpus), with a quota there
	be := newTenantFile(t, state, tenantcfg.File{TenantID: 2, Policy: "p", Class: "best-effort", GPUs: []int{1}, GPUQuotaBytes: []uint64{1 << 30}})
	boardPath := filepath.Join(state, "board", FileName)
	pub := openPublisher(t, state)
	runPublisher(t, pub)
	time.Sleep(2 * RescanInterval)

	// during: best-effort launches admitted in the later half of a request
	// (the board has seen it start), not within a millisecond of its end
	run := func(pace uint32, gpus uint64) (during, launches int) {
		t.Helper()
		pub.SetControl(Control{Pace: pace, PaceGPUs: gpus})
		beCmd, beOut := startGateBE(t, build, be, boardPath, 2000)
		lcCmd := exec.Command(filepath.Join(build, "fake", "gateapp"), "lcsync", "25", "2", "30000")
		lcCmd.Env = append(lc.env(build, boardPath), "FAKECUDA_SYNC_US=30000")
		lcOut, err := lcCmd.Output()
		if err != nil {
			t.Fatalf("lc: %v\n%s", err, lcOut)
		}
		if err := beCmd.Wait(); err != nil {
			t.Fatalf("be: %v", err)
		}
		reqs := fields(t, lcOut, "lc")
		beLines := fields(t, []byte(beOut.String()), "be")
		for _, f := range beLines {
			for _, r := range reqs[3:] { // after the first requests: a mean to expect an end from
				if mid := r[0] + (r[1]-r[0])/2; f[1] >= mid && f[1]+uint64(time.Millisecond) < r[1] {
					during++
				}
			}
		}
		return during, len(beLines)
	}
	free, _ := run(PaceNone, 0)
	paced, n := run(PaceRequest, 1<<1|1<<3) // the missing tenants are on GPUs 1 and 3
	if free < 50 || paced*10 > free {
		t.Errorf("best-effort launches admitted during requests: %d paced, %d not: want at most a tenth when paced (and many when not)", paced, free)
	}
	if n < 100 {
		t.Errorf("paced: the best-effort process made %d launches in 2 s, want it to keep launching between requests", n)
	}
	// pacing scoped to GPU 3 alone: this tenant (GPU 1) is not held
	other, _ := run(PaceRequest, 1<<3)
	if other*2 < free {
		t.Errorf("paced on another GPU: %d launches admitted during requests against %d unpaced, want about as many", other, free)
	}
	t.Logf("admitted during requests: %d not paced, %d paced; %d launches paced", free, paced, n)
}

// The pacing depth: a paced best-effort process whose launches stay
// unfinished (FAKECUDA_EVENT_PENDING=1: the fake's events never complete)
// makes depth launches at once, then each waits out its longest delay
// (50 ms) for the launch depth places back. Launches that finish (the
// fake's default) cost it nothing, and without pacing, or with pacing and
// no bound, unfinished launches hold nothing back while no request runs.
func TestPacingDepthBoundsUnfinishedLaunches(t *testing.T) {
	build := buildDevrt(t)
	state := t.TempDir()
	be := newTenantFile(t, state, tenantcfg.File{TenantID: 2, Policy: "p", Class: "best-effort"})
	boardPath := filepath.Join(state, "board", FileName)
	pub := openPublisher(t, state)
	runPublisher(t, pub)
	time.Sleep(2 * RescanInterval)

	run := func(c Control, pending bool) (launches int, delayed uint64) {
		t.Helper()
		pub.SetControl(c)
		before, _ := ReadUsage(be.acct)
		cmd := exec.Command(filepath.Join(build, "fake", "gateapp"), "be", "600", "1000")
		cmd.Env = be.env(build, boardPath)
		if pending {
			cmd.Env = append(cmd.Env, "FAKECUDA_EVENT_PENDING=1")
		}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("be: %v\n%s", err, out)
		}
		after, err := ReadUsage(be.acct)
		if err != nil {
			t.Fatal(err)
		}
		return len(fields(t, out, "be")), after.DelayedLaunches - before.DelayedLaunches
	}
	free, _ := run(Control{}, true)
	noBound, _ := run(Control{Pace: PaceRequest}, true)
	bounded, delayed := run(Control{Pace: PaceRequest, PaceDepth: 2}, true)
	finished, _ := run(Control{Pace: PaceRequest, PaceDepth: 2}, false)
	t.Logf("launches in 600 ms: %d not paced, %d paced without a bound, %d with depth 2 (%d delayed), %d with depth 2 and launches that finish",
		free, noBound, bounded, delayed, finished)
	if free < 200 || noBound < 200 {
		t.Errorf("unfinished launches held back a process not bounded: %d launches not paced, %d paced without a bound, want at least 200 each", free, noBound)
	}
	// 2 at once, then one per 50 ms delay: 2 + 600/50
	if bounded < 6 || bounded > 16 || delayed+3 < uint64(bounded) {
		t.Errorf("depth 2, launches never finishing: %d launches (%d delayed), want 2 at once and then one per 50 ms delay (6..16, all but 2 delayed)", bounded, delayed)
	}
	if finished < 200 {
		t.Errorf("depth 2, launches that finish: %d launches, want at least 200 (the bound costs nothing)", finished)
	}
}

// The controller's hold (PaceHold, while it measures a latency-critical
// tenant alone): a best-effort process of a GPU held launches nothing
// until the hold ends, then at once; one on another GPU is not held.
func TestHoldStopsBestEffortLaunches(t *testing.T) {
	build := buildDevrt(t)
	state := t.TempDir()
	be := newTenantFile(t, state, tenantcfg.File{TenantID: 2, Policy: "p", Class: "best-effort", GPUs: []int{1}, GPUQuotaBytes: []uint64{1 << 30}})
	boardPath := filepath.Join(state, "board", FileName)
	pub := openPublisher(t, state)
	runPublisher(t, pub)
	time.Sleep(2 * RescanInterval)

	run := func(gpus uint64) (held, after int, release uint64) {
		t.Helper()
		pub.SetControl(Control{Pace: PaceHold, PaceGPUs: gpus})
		cmd, out := startGateBE(t, build, be, boardPath, 1000)
		time.Sleep(500 * time.Millisecond)
		release = monotonicNow()
		pub.SetControl(Control{})
		if err := cmd.Wait(); err != nil {
			t.Fatalf("be: %v", err)
		}
		for _, f := range fields(t, []byte(out.String()), "be") {
			if f[1] < release {
				held++
			} else {
				after++
			}
		}
		return held, after, release
	}
	held, after, _ := run(1<<1 | 1<<3)
	t.Logf("held on its GPU: %d launches during the hold, %d after", held, after)
	if held != 0 || after < 100 {
		t.Errorf("held on its GPU: %d launches during the hold, %d after: want none during, and many after", held, after)
	}
	other, _, _ := run(1 << 3)
	if other < 100 {
		t.Errorf("a hold on another GPU: %d launches during it, want the process not held", other)
	}
}

// A process that used the GPU and exits counts in its tenant's header,
// and one whose status is not 0 counts as failed: what the host reports
// of a trainer that stops on a NaN loss. A process killed by a signal runs
// no exit handler and counts in neither.
func TestExitsCounted(t *testing.T) {
	build := buildDevrt(t)
	state := t.TempDir()
	be := newTenantFile(t, state, tenantcfg.File{TenantID: 2, Policy: "p", Class: "best-effort"})
	run := func(steps ...string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(build, "fake", "app_procaddr"), steps...)
		cmd.Env = be.env(build, filepath.Join(state, "board", FileName))
		_ = cmd.Run() // the failing run's status is the point
	}
	run("alloc", "1MiB")          // exit 0
	run("alloc", "1MiB", "bogus") // an unknown step: exit 2
	kill := exec.Command(filepath.Join(build, "fake", "app_procaddr"), "alloc", "1MiB", "hold")
	kill.Env = be.env(build, filepath.Join(state, "board", FileName))
	if err := kill.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	_ = kill.Process.Kill()
	_ = kill.Wait()
	u, err := ReadUsage(be.acct)
	if err != nil {
		t.Fatal(err)
	}
	if u.Exits != 2 || u.FailedExits != 1 {
		t.Errorf("exits %d, failed %d: want 2 and 1 (the killed process runs no handler)", u.Exits, u.FailedExits)
	}
}

// startGateBE starts the gate app's best-effort loop (a launch every
// millisecond for ms) as a process of tenant tn; its output goes to out.
func startGateBE(t *testing.T, build string, tn tenant, boardPath string, ms int) (cmd *exec.Cmd, out *strings.Builder) {
	t.Helper()
	cmd = exec.Command(filepath.Join(build, "fake", "gateapp"), "be", fmt.Sprint(ms), "1000")
	cmd.Env = tn.env(build, boardPath)
	out = &strings.Builder{}
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}
