package devrt

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/devrt/tenantcfg"
)

// A best-effort tenant with smPercent and mpsClientPriority: with an MPS
// server to talk to, the interposer sets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
// and CUDA_MPS_CLIENT_PRIORITY before the real cuInit, so the driver creates
// its contexts with them, on every GPU, and its launches no longer wait on
// the board (the SM share is the isolation); without a server it says so and
// the launch gate stays on (the policy has launchGate).
func TestMPSShare(t *testing.T) {
	lc := newTenant(t, 22, 0, "latency-critical", func(f *tenantcfg.File) { f.ActiveWindowUS = 400000 })
	be := newTenant(t, 23, 0, "best-effort", func(f *tenantcfg.File) { f.SMPercent = 40; f.MPSClientPriority = 1; f.LaunchGate = true })
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
	if !strings.Contains(stderr, "smPercent 40, mpsClientPriority 1 set but no MPS server") {
		t.Errorf("no log line about the missing MPS server:\n%s", stderr)
	}
	if us := launchUS(lines); us < 40000 {
		t.Fatalf("without MPS the best-effort launch took %dus while latency-critical work was pending, want the gate's ~50ms", us)
	}

	// An MPS server (its control pipe exists): confined, not gated, and the
	// driver sees the policy's share and client priority when it creates
	// the context.
	if err := os.WriteFile(filepath.Join(pipe, "control"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	before := be.usage().num(t, "delayed")
	lines, stderr = be.run("app_procaddr", "launch", "1")
	if !strings.Contains(stderr, "launch gate off") {
		t.Errorf("no log line for the SM share:\n%s", stderr)
	}
	if us := launchUS(lines); us > 30000 {
		t.Errorf("confined best-effort launch waited %dus", us)
	}
	if d := be.usage().num(t, "delayed"); d != before {
		t.Errorf("delayed launches went from %d to %d under MPS", before, d)
	}
	base := append(slices.Clip(be.extra), "FAKECUDA_DEVICES=2")
	mpsSeen := func(env ...string) []string {
		t.Helper()
		os.Remove(be.fakeLog)
		be.extra = append(slices.Clip(base), env...)
		be.run("app_procaddr", "device", "0", "launch", "1", "device", "1", "launch", "1")
		var seen []string
		for _, l := range be.driverCalls(0) {
			if i := strings.Index(l, "mps-context "); i >= 0 {
				seen = append(seen, l[i:])
			}
		}
		return seen
	}
	// Two GPUs: the share and the priority hold on each (per GPU, not split
	// between them: MPS applies them to every context the client creates).
	want := func(share, prio string) []string {
		var w []string
		for _, dev := range []string{"0", "1"} {
			w = append(w, "mps-context api=cuDevicePrimaryCtxRetain dev="+dev+" active_thread_percentage="+share+" client_priority="+prio)
		}
		return w
	}
	if got := mpsSeen(); !slices.Equal(slices.Compact(got), want("40", "1")) {
		t.Errorf("the driver saw %q, want the policy's share 40 and priority 1 on both GPUs", got)
	}
	// A smaller share or a priority as low as the policy's, the tenant's
	// own, is kept.
	if got := mpsSeen("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25", "CUDA_MPS_CLIENT_PRIORITY=1"); !slices.Equal(slices.Compact(got), want("25", "1")) {
		t.Errorf("the environment's smaller share did not win: the driver saw %q", got)
	}
	// A larger share or a higher priority is not: a best-effort tenant
	// cannot raise its own (review row 11).
	for _, own := range []string{"100", "41", "0", "40x", "", "-1"} {
		if got := mpsSeen("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=" + own); !slices.Equal(slices.Compact(got), want("40", "1")) {
			t.Errorf("the tenant's own CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%q: the driver saw %q, want share 40", own, got)
		}
	}
	for _, own := range []string{"0", "", "x", "-1", "00", "1x"} {
		if got := mpsSeen("CUDA_MPS_CLIENT_PRIORITY=" + own); !slices.Equal(slices.Compact(got), want("40", "1")) {
			t.Errorf("the tenant's own CUDA_MPS_CLIENT_PRIORITY=%q: the driver saw %q, want priority 1", own, got)
		}
	}
}

// A latency-critical tenant under MPS keeps normal priority and the whole
// GPU: the interposer sets neither variable for it.
func TestMPSLatencyCriticalUntouched(t *testing.T) {
	lc := newTenant(t, 24, 0, "latency-critical", func(f *tenantcfg.File) { f.SMPercent = 30; f.MPSClientPriority = 1 })
	pipe := t.TempDir()
	if err := os.WriteFile(filepath.Join(pipe, "control"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	lc.extra = []string{"CUDA_MPS_PIPE_DIRECTORY=" + pipe}
	lc.run("app_procaddr", "device", "0", "launch", "1")
	n := 0
	for _, l := range lc.driverCalls(0) {
		if strings.Contains(l, "mps-context ") {
			n++
			if !strings.Contains(l, "active_thread_percentage=unset client_priority=unset") {
				t.Errorf("latency-critical context created with %q", l)
			}
		}
	}
	if n == 0 {
		t.Fatal("no context created under MPS: the test saw nothing")
	}
}
