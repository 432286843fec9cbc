package board

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/internal/admission"
)

// buildDevrt builds the interposer, the fake libcuda and the test apps.
func buildDevrt(t *testing.T) string {
	t.Helper()
	out := t.TempDir()
	if b, err := exec.Command("sh", "../build.sh", out).CombinedOutput(); err != nil {
		t.Fatalf("devrt/build.sh: %v\n%s", err, b)
	}
	return out
}

type tenant struct{ dir, acct string }

// newTenant writes a tenant dir (admission's writer) and its accounting dir under state.
func newTenant(t *testing.T, state string, id int, class string, windowUs int) tenant {
	t.Helper()
	tn := tenant{dir: filepath.Join(state, "tenants", strconv.Itoa(id)), acct: filepath.Join(state, "acct", strconv.Itoa(id))}
	for _, d := range []string{tn.dir, tn.acct} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	tf := admission.TenantFile{TenantID: uint32(id), Policy: "p", Class: class, ActiveWindowUS: uint32(windowUs)}
	if err := admission.WriteTenantFiles(tn.dir, tf); err != nil {
		t.Fatal(err)
	}
	return tn
}

// launch runs the test app's `launch 1` under the interposer as a process of
// tenant tn and returns the launch's elapsed microseconds.
func launch(t *testing.T, build string, tn tenant, boardPath string) int {
	t.Helper()
	cmd := exec.Command(filepath.Join(build, "fake", "app_procaddr"), "launch", "1")
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+filepath.Join(build, "libgpuext-devrt.so"),
		"LD_LIBRARY_PATH="+filepath.Join(build, "fake"), admission.EnvTenantDir+"="+tn.dir,
		"GPUEXT_TENANT_ACCT="+tn.acct, "GPUEXT_BOARD="+boardPath, "FAKECUDA_KERNEL_US=0")
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
	pub, err := Open(filepath.Join(state, "board"), filepath.Join(state, "acct"))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
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
	u, err := ReadUsage(filepath.Join(be.acct, "usage"))
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
	pub.rescan = time.Time{} // rescan now
	if until := pub.Publish(); until != 0 {
		t.Fatalf("board still shows latency-critical work (%d) after its tenant left", until)
	}
	if us := launch(t, build, be, boardPath); us > 5000 {
		t.Errorf("best-effort launch after the latency-critical tenant left took %dus", us)
	}
}

// TestReadUsageCountsLiveProcessesOnly: the tenant view shows a process's
// device memory while it lives and drops it when the process is killed.
func TestReadUsageCountsLiveProcessesOnly(t *testing.T) {
	build := buildDevrt(t)
	state := t.TempDir()
	tn := newTenant(t, state, 3, "standard", 0)
	cmd := exec.Command(filepath.Join(build, "fake", "app_procaddr"), "alloc", "1GiB", "hold")
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+filepath.Join(build, "libgpuext-devrt.so"),
		"LD_LIBRARY_PATH="+filepath.Join(build, "fake"), admission.EnvTenantDir+"="+tn.dir, "GPUEXT_TENANT_ACCT="+tn.acct)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	var got string
	for !strings.Contains(got, "hold") {
		n, err := out.Read(buf)
		if err != nil {
			t.Fatalf("app output %q: %v", got, err)
		}
		got += string(buf[:n])
	}
	usage := filepath.Join(tn.acct, "usage")
	u, err := ReadUsage(usage)
	if err != nil {
		t.Fatal(err)
	}
	if u.UsedBytes != 1<<30 || u.PeakBytes != 1<<30 || u.TenantID != 3 {
		t.Errorf("while the app holds 1GiB: %+v", u)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if u, err = ReadUsage(usage); err != nil || u.UsedBytes != 0 {
		t.Errorf("after kill -9: used %d (%v), want 0", u.UsedBytes, err)
	}
}
