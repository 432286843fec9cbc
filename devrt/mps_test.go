package devrt

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/internal/admission"
)

// A best-effort tenant with smPercent: with an MPS server to talk to, the
// interposer sets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE before the real cuInit
// and its launches no longer wait on the board (the SM share is the
// isolation); without a server it says so and the launch gate stays on.
func TestMPSShare(t *testing.T) {
	lc := newTenant(t, 22, 0, "latency-critical", func(f *admission.TenantFile) { f.ActiveWindowUS = 400000 })
	be := newTenant(t, 23, 0, "best-effort", func(f *admission.TenantFile) { f.SMPercent = 40 })
	board := filepath.Join(t.TempDir(), "board")
	pipe := t.TempDir()
	for _, tn := range []*tenant{lc, be} {
		tn.extra = []string{"GPUEXT_BOARD=" + board, "FAKECUDA_KERNEL_US=100", "CUDA_MPS_PIPE_DIRECTORY=" + pipe}
	}
	lc.run("app_procaddr", "launch", "1")
	dump := filepath.Join(lc.bin, "usage_dump")
	if out, err := exec.Command(dump, "publish", board, filepath.Join(lc.acct, "usage")).CombinedOutput(); err != nil {
		t.Fatalf("publish: %v\n%s", err, out)
	}
	launchUS := func(lines []string) int {
		t.Helper()
		f := strings.Fields(lines[0])
		us, err := strconv.Atoi(strings.TrimPrefix(f[len(f)-1], "us="))
		if err != nil {
			t.Fatalf("launch line %q", lines[0])
		}
		return us
	}

	// No MPS server in the pipe directory: the gate holds the launch back.
	lines, stderr := be.run("app_procaddr", "launch", "1")
	if !strings.Contains(stderr, "smPercent 40 set but no MPS server") {
		t.Errorf("no log line about the missing MPS server:\n%s", stderr)
	}
	if us := launchUS(lines); us < 40000 {
		t.Fatalf("without MPS the best-effort launch took %dus while latency-critical work was pending, want the gate's ~50ms", us)
	}

	// An MPS server (its control pipe exists): confined, not gated.
	if err := os.WriteFile(filepath.Join(pipe, "control"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	before := be.usage().num(t, "delayed")
	lines, stderr = be.run("app_procaddr", "launch", "1")
	if !strings.Contains(stderr, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40, launch gate off") {
		t.Errorf("no log line for the SM share:\n%s", stderr)
	}
	if us := launchUS(lines); us > 30000 {
		t.Errorf("confined best-effort launch waited %dus", us)
	}
	if d := be.usage().num(t, "delayed"); d != before {
		t.Errorf("delayed launches went from %d to %d under MPS", before, d)
	}

	// A smaller share the tenant set in its environment wins over the policy's.
	base := be.extra
	be.extra = append(base, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25")
	_, stderr = be.run("app_procaddr", "launch", "1")
	if !strings.Contains(stderr, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25, launch gate off") {
		t.Errorf("the environment's smaller share did not win:\n%s", stderr)
	}
	// A larger one does not: a best-effort tenant cannot raise its own share.
	for _, own := range []string{"100", "41", "0", "40x", ""} {
		be.extra = append(base, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="+own)
		_, stderr = be.run("app_procaddr", "launch", "1")
		if !strings.Contains(stderr, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40, launch gate off") {
			t.Errorf("the tenant's own CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%q raised its share past the policy's 40:\n%s", own, stderr)
		}
	}
}
