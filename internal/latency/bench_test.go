package latency

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/devrt/board"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
)

type nullBoard struct{}

func (nullBoard) SetControl(board.Control) {}

// BenchmarkControllerStep: one Step of the controller on a node of 100
// tenants (10 latency-critical with a target, 90 best-effort), each with its
// settings.bin and a usage file as the device runtime lays it out, read
// through the host's real readers; the status file written each step.
// Reports the CPU per step (getrusage) and, at the agent's 1 s interval,
// the share of one core.
func BenchmarkControllerStep(b *testing.B) {
	state := b.TempDir()
	tenants, acct := filepath.Join(state, "tenants"), filepath.Join(state, "acct")
	for i := 1; i <= 100; i++ {
		f := tenantcfg.File{TenantID: uint32(i), Policy: "p", Class: "best-effort", SMPercent: 40, MPSClientPriority: 1}
		if i <= 10 {
			f = tenantcfg.File{TenantID: uint32(i), Policy: "p", Class: "latency-critical", LatencyTarget: "1.5x"}
		}
		dir := filepath.Join(tenants, fmt.Sprint(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := tenantcfg.WriteFiles(dir, f); err != nil {
			b.Fatal(err)
		}
		var h board.Histogram
		h[board.BucketOf(300*time.Microsecond)] = 5000
		h[board.BucketOf(2*time.Millisecond)] = 40
		a := filepath.Join(acct, fmt.Sprint(i))
		if err := os.MkdirAll(a, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(a, board.UsageFileName), board.EncodeUsage(board.Usage{TenantID: uint64(i), Latency: h, Synced: 9}), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	c := New(Config{}, board.TenantSettings(tenants), acct, nullBoard{}, nil)
	c.SetStatusFile(StatusPath(state))
	c.SetStateFile(StatePath(state))
	now := time.Unix(1000, 0)
	c.Step(now)
	var r0, r1 unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &r0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Second)
		c.Step(now)
	}
	b.StopTimer()
	_ = unix.Getrusage(unix.RUSAGE_SELF, &r1)
	cpu := time.Duration(r1.Utime.Nano()+r1.Stime.Nano()-r0.Utime.Nano()-r0.Stime.Nano()) / time.Duration(b.N)
	b.ReportMetric(float64(cpu.Microseconds()), "cpu-us/step")
	b.ReportMetric(float64(cpu)/float64(time.Second)*100, "cpu-%-at-1s")
}
