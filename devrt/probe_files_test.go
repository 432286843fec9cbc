package devrt

// The files a tenant's processes leave in its probes directory: a process
// that is gone (exited, or killed) keeps its files, so its counts stay in
// the tenant's totals, until more than GPUEXT_DEVRT_PROBE_KEEP_GONE (64)
// processes are gone: then the next process of the tenant removes the
// oldest beyond that many. A live one always keeps them.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// filesOf lists the probes directory's files of key (name order).
func filesOf(t *testing.T, dir string, key int) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		n := strings.TrimPrefix(e.Name(), ".")
		if strings.HasPrefix(n, fmt.Sprintf("%d.", key)) || strings.HasPrefix(n, fmt.Sprintf("%d-", key)) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// startHolder starts an app that loads an image, launches and sleeps, and
// waits for its status file.
func startHolder(t *testing.T, tn *tenant, in string) *exec.Cmd {
	t.Helper()
	c := tn.cmd("app_image", "mod", in, "launch", "1", "sleep", "20000")
	c.Env = append(c.Env, "FAKECUDA_IMAGE_DIR="+t.TempDir())
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	status := filepath.Join(tn.acct, "probes", fmt.Sprintf("%d.status", c.Process.Pid))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(status); err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d wrote no status file", c.Process.Pid)
		}
	}
}

// TestProbeFilesOfGoneProcessesKept: by default the next process keeps
// the files of processes that are gone (the tenant's totals count them).
func TestProbeFilesOfGoneProcessesKept(t *testing.T) {
	tn := probeTenant(t, 45, true)
	in := filepath.Join("testdata", "ptx", "multi.ptx")
	dir := filepath.Join(tn.acct, "probes")
	first := tn.runImages(nil, "mod", in, "launch", "1")
	had := filesOf(t, dir, first.pid)
	if len(had) < 2 {
		t.Fatalf("a process's files after it ran: %v, want its status and maps", had)
	}
	next := tn.runImages(nil, "mod", in, "launch", "1")
	if got := filesOf(t, dir, first.pid); strings.Join(got, " ") != strings.Join(had, " ") {
		t.Errorf("the gone process %d's files after the next one started: %v, want %v kept", first.pid, got, had)
	}
	if got := filesOf(t, dir, next.pid); len(got) < 2 {
		t.Errorf("the next process's own files: %v", got)
	}
}

// TestProbeFilesOfGoneProcessesRemoved: past the tenant's keep count (here
// 1), the next process removes the files of the oldest gone processes.
func TestProbeFilesOfGoneProcessesRemoved(t *testing.T) {
	tn := probeTenant(t, 44, true)
	in := filepath.Join("testdata", "ptx", "multi.ptx")
	dir := filepath.Join(tn.acct, "probes")
	keep1 := []string{"GPUEXT_DEVRT_PROBE_KEEP_GONE=1"}

	exited := tn.runImages(keep1, "mod", in, "launch", "1")
	if got := filesOf(t, dir, exited.pid); len(got) < 2 {
		t.Fatalf("a process's files after it ran: %v, want its status and maps", got)
	}
	time.Sleep(20 * time.Millisecond) // the killed one's status is newer
	live := startHolder(t, tn, in)
	killed := startHolder(t, tn, in)
	if err := killed.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed.Wait()
	liveFiles := filesOf(t, dir, live.Process.Pid)

	next := tn.runImages(keep1, "mod", in, "launch", "1")
	if got := filesOf(t, dir, exited.pid); len(got) != 0 {
		t.Errorf("the oldest gone process %d's files are still there after the next process started (keep 1): %v", exited.pid, got)
	}
	if got := filesOf(t, dir, killed.Process.Pid); len(got) == 0 {
		t.Errorf("the newest gone process %d's files were removed (keep 1)", killed.Process.Pid)
	}
	if got := filesOf(t, dir, live.Process.Pid); len(got) == 0 || !strings.Contains(strings.Join(got, " "), fmt.Sprintf("%d.status", live.Process.Pid)) {
		t.Errorf("a live process's files were removed: had %v, have %v", liveFiles, got)
	}
	if got := filesOf(t, dir, next.pid); len(got) < 2 {
		t.Errorf("the new process's own files: %v", got)
	}
	if st := next.status(t); len(st) == 0 {
		t.Errorf("the new process wrote no status")
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".claim-") {
			t.Errorf("a claim file was left: %s", e.Name())
		}
	}
}
