package board

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/lib/testutil"
)

var apps struct {
	once sync.Once
	err  error
}

// buildDevrt is devrt/build.sh's output (testutil.BuildDevrt: the
// interposer, the fake libcuda, the test apps) with this package's
// testdata/slotapp.c and gateapp.c built into its fake/, once per test
// binary.
func buildDevrt(t testing.TB) string {
	t.Helper()
	dir := testutil.BuildDevrt(t)
	apps.once.Do(func() {
		for _, app := range []string{"slotapp", "gateapp"} {
			cc := exec.Command("gcc", "-O2", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-I../lib", "-I../include",
				"-o", filepath.Join(dir, "fake", app), "testdata/"+app+".c",
				"-L"+filepath.Join(dir, "fake"), "-l:libcuda.so.1")
			if b, err := cc.CombinedOutput(); err != nil {
				apps.err = fmt.Errorf("%s: %w\n%s", app, err, b)
				return
			}
		}
	})
	if apps.err != nil {
		t.Fatal(apps.err)
	}
	return dir
}

type tenant struct{ dir, acct string }

// newTenant writes a tenant dir (admission's writer) and its accounting dir under state.
// newTenant writes a tenant of class; a best-effort one has the launch
// gate (launchGate), which these tests are about.
func newTenant(t testing.TB, state string, id int, class string, windowUs int) tenant {
	return newTenantFile(t, state, tenantcfg.File{TenantID: uint32(id), Policy: "p", Class: class, ActiveWindowUS: uint32(windowUs),
		LaunchGate: class == "best-effort"})
}

func newTenantFile(t testing.TB, state string, tf tenantcfg.File) tenant {
	t.Helper()
	id := strconv.Itoa(int(tf.TenantID))
	tn := tenant{dir: filepath.Join(state, "tenants", id), acct: filepath.Join(state, "acct", id)}
	for _, d := range []string{tn.dir, tn.acct} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := tenantcfg.WriteFiles(tn.dir, tf); err != nil {
		t.Fatal(err)
	}
	return tn
}

// openPublisher opens a publisher of state's board over its tenant dirs.
func openPublisher(t testing.TB, state string) *Publisher {
	t.Helper()
	pub, err := Open(filepath.Join(state, "board"), filepath.Join(state, "acct"), TenantSettings(filepath.Join(state, "tenants")), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pub.Close)
	return pub
}

func (tn tenant) env(build, boardPath string) []string {
	return append(os.Environ(), "LD_PRELOAD="+filepath.Join(build, "libgpuext-devrt.so"),
		"LD_LIBRARY_PATH="+filepath.Join(build, "fake"), tenantcfg.EnvTenantDir+"="+tn.dir,
		"GPUEXT_TENANT_ACCT="+tn.acct, "GPUEXT_BOARD="+boardPath, "FAKECUDA_KERNEL_US=0")
}

// launch runs the test app's `launch 1` under the interposer as a process of
// tenant tn and returns the launch's elapsed microseconds.
func launch(t testing.TB, build string, tn tenant, boardPath string) int {
	t.Helper()
	cmd := exec.Command(filepath.Join(build, "fake", "app_procaddr"), "launch", "1")
	cmd.Env = tn.env(build, boardPath)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("app: %v\n%s", err, out)
	}
	line := strings.TrimSpace(string(out))
	_, us, ok := strings.Cut(line, "us=")
	if !ok || !strings.HasPrefix(line, "launch 1 ok") {
		t.Fatalf("app printed %q", line)
	}
	n, _ := strconv.Atoi(strings.Fields(us)[0])
	return n
}

// holder is a process of a tenant that ran its steps and waits to be killed.
type holder struct {
	cmd   *exec.Cmd
	lines []string
}

// hold starts app (in build/fake) with steps under the interposer and
// waits until it printed want (its last line before it holds).
func hold(t *testing.T, build string, tn tenant, want string, app string, steps ...string) *holder {
	t.Helper()
	cmd := exec.Command(filepath.Join(build, "fake", app), steps...)
	cmd.Env = tn.env(build, "")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{cmd: cmd}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("%s %v exited before %q: %q", app, steps, want, h.lines)
			}
			h.lines = append(h.lines, l)
			if l == want {
				go func() {
					for range lines {
					}
				}()
				return h
			}
		case <-timeout:
			t.Fatalf("%s %v: no %q after 20s: %q", app, steps, want, h.lines)
		}
	}
}

// TestBoardGatesBestEffort: a latency-critical tenant's launch makes its
// pending window visible on the board the host publishes; a best-effort
// tenant's launch then waits and counts a delayed launch; a latency-critical
// launch never waits; once no latency-critical work is pending, best-effort
// launches run at once.
func TestBoardGatesBestEffort(t *testing.T) {
	build := buildDevrt(t)
	state := t.TempDir()
	lc := newTenant(t, state, 1, "latency-critical", 30000) // 30ms window per launch
	be := newTenant(t, state, 2, "best-effort", 0)
	pub := openPublisher(t, state)
	boardPath := filepath.Join(state, "board", FileName)

	if us := launch(t, build, be, boardPath); us > 5000 {
		t.Fatalf("best-effort launch with nothing pending took %dus", us)
	}
	launch(t, build, lc, boardPath)
	if pub.Publish() == 0 {
		t.Fatal("board shows no latency-critical work right after a latency-critical launch")
	}
	if us := launch(t, build, be, boardPath); us < 5000 {
		t.Errorf("best-effort launch while latency-critical work is pending took only %dus", us)
	}
	if us := launch(t, build, lc, boardPath); us > 5000 {
		t.Errorf("latency-critical launch waited %dus", us)
	}
	u, err := ReadUsage(be.acct)
	if err != nil {
		t.Fatal(err)
	}
	if u.DelayedLaunches != 1 || u.Launches != 2 {
		t.Errorf("best-effort tenant usage: delayed %d launches %d, want 1 and 2", u.DelayedLaunches, u.Launches)
	}
	// The latency-critical tenant goes away: nothing is pending any more.
	if err := os.RemoveAll(lc.acct); err != nil {
		t.Fatal(err)
	}
	pub.nextScan = time.Time{} // rescan now
	if until := pub.Publish(); until != 0 {
		t.Fatalf("board still shows latency-critical work (%d) after its tenant left", until)
	}
	if us := launch(t, build, be, boardPath); us > 5000 {
		t.Errorf("best-effort launch after the latency-critical tenant left took %dus", us)
	}
}

// TestBestEffortWithoutGateNeverWaits: the launch gate is the policy's
// choice (launchGate), off by default: a best-effort tenant without it
// launches at once while latency-critical work is pending, and counts no
// delayed launch; its gated neighbour on the same board waits.
func TestBestEffortWithoutGateNeverWaits(t *testing.T) {
	build := buildDevrt(t)
	state := t.TempDir()
	lc := newTenant(t, state, 1, "latency-critical", 60000)
	free := newTenantFile(t, state, tenantcfg.File{TenantID: 2, Policy: "p", Class: "best-effort"})
	gated := newTenant(t, state, 3, "best-effort", 0)
	pub := openPublisher(t, state)
	boardPath := filepath.Join(state, "board", FileName)

	launch(t, build, lc, boardPath)
	if pub.Publish() == 0 {
		t.Fatal("board shows no latency-critical work right after a latency-critical launch")
	}
	if us := launch(t, build, gated, boardPath); us < 5000 {
		t.Fatalf("gated best-effort launch while latency-critical work is pending took only %dus: the scenario did not run", us)
	}
	launch(t, build, lc, boardPath) // pending again
	pub.Publish()
	for i := 0; i < 3; i++ {
		if us := launch(t, build, free, boardPath); us > 5000 {
			t.Errorf("best-effort launch without launchGate took %dus while latency-critical work was pending", us)
		}
	}
	u, err := ReadUsage(free.acct)
	if err != nil {
		t.Fatal(err)
	}
	if u.Launches != 3 || u.DelayedLaunches != 0 {
		t.Errorf("best-effort tenant without launchGate: launches %d delayed %d, want 3 and 0", u.Launches, u.DelayedLaunches)
	}
}

// TestIdlePublisherSeesStart: the publisher, idle (nothing pending, so it
// reads once per RescanInterval), publishes a latency-critical tenant's
// first launch within that interval.
func TestIdlePublisherSeesStart(t *testing.T) {
	build := buildDevrt(t)
	state := t.TempDir()
	lc := newTenant(t, state, 1, "latency-critical", 100000) // 100ms
	pub := openPublisher(t, state)
	launch(t, build, lc, filepath.Join(state, "board", FileName)) // the usage file exists
	runPublisher(t, pub)
	time.Sleep(200 * time.Millisecond) // the first scan found the window of that launch, which has passed
	if until, _ := pub.Board(); until > monotonicNow() {
		t.Fatalf("board shows work pending (%d) before the launch", until)
	}
	start := monotonicNow()
	launch(t, build, lc, filepath.Join(state, "board", FileName))
	for {
		if until, _ := pub.Board(); until > start {
			t.Logf("published %v after the launch began", time.Duration(monotonicNow()-start))
			break
		}
		if time.Duration(monotonicNow()-start) > RescanInterval+200*time.Millisecond {
			t.Fatalf("the launch was not published within %v", RescanInterval+200*time.Millisecond)
		}
		time.Sleep(time.Millisecond)
	}
}

// runPublisher runs pub.Run until the test ends, and checks then that Run
// returns (it did not die or block on a tenant's file).
func runPublisher(t *testing.T, pub *Publisher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pub.Run(ctx, time.Millisecond)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("publisher did not stop within 5s: it is blocked")
		}
	})
}

// TestReadUsageCountsLiveProcessesOnly: the tenant view shows a process's
// device memory while it lives and drops it when the process is killed.
func TestReadUsageCountsLiveProcessesOnly(t *testing.T) {
	build := buildDevrt(t)
	state := t.TempDir()
	tn := newTenant(t, state, 3, "standard", 0)
	h := hold(t, build, tn, "hold", "app_procaddr", "alloc", "1GiB", "hold")
	u, err := ReadUsage(tn.acct)
	if err != nil {
		t.Fatal(err)
	}
	if u.UsedBytes != 1<<30 || u.PeakBytes != 1<<30 || u.TenantID != 3 {
		t.Errorf("while the app holds 1GiB: %+v", u)
	}
	h.cmd.Process.Kill()
	h.cmd.Wait()
	if u, err = ReadUsage(tn.acct); err != nil || u.UsedBytes != 0 {
		t.Errorf("after kill -9: used %d (%v), want 0", u.UsedBytes, err)
	}
}

// TestWindowCountsFromTheEndOfWork: a latency-critical request whose wait
// for the GPU (cuCtxSynchronize) outlasts its window still leaves its
// tenant's work pending for a window after the wait returns, on the board
// the host publishes, through the driver's table (cuGetProcAddress) and
// through the linked symbol. Before, the window counted from the launch
// alone: a request held up by a best-effort kernel lapsed before the next
// one came and let best-effort launches in (the H200's gate regime).
func TestWindowCountsFromTheEndOfWork(t *testing.T) {
	build := buildDevrt(t)
	const window, work = 200 * time.Millisecond, 400 * time.Millisecond
	t.Setenv("FAKECUDA_SYNC_US", strconv.Itoa(int(work/time.Microsecond)))
	for _, app := range []string{"app_procaddr", "app_linked"} {
		t.Run(app, func(t *testing.T) {
			state := t.TempDir()
			lc := newTenant(t, state, 1, "latency-critical", int(window/time.Microsecond))
			pub := openPublisher(t, state)
			runPublisher(t, pub)
			start := monotonicNow()
			h := hold(t, build, lc, "hold", app, "launch", "1", "sync", "hold")
			returned := monotonicNow()
			if !strings.HasPrefix(h.lines[len(h.lines)-2], "sync ok") {
				t.Fatalf("app: %q", h.lines)
			}
			if time.Duration(returned-start) < work {
				t.Fatalf("the sync returned after %v, before the work (%v) was done", time.Duration(returned-start), work)
			}
			// the deadline the host publishes: a window from the sync's return
			var until uint64
			for deadline := time.Now().Add(RescanInterval + time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if until, _ = pub.Board(); until > returned {
					break
				}
			}
			if until <= returned {
				t.Fatalf("board %d: no work pending after the sync returned (at %d; the launch's window ended at %d)",
					until, returned, start+uint64(window))
			}
			if left := time.Duration(until - returned); left < window/2 {
				t.Errorf("board shows work pending for %v after the sync returned, want about the window (%v)", left, window)
			}
		})
	}
}
