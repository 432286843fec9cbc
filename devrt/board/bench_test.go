package board

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// BenchmarkPublisherCPU measures what the publisher costs the host: its
// process's CPU time (getrusage) over GPUEXT_BENCH_BOARD_SECONDS (default
// 10) of Run, as the agent runs it, over 100 tenants (10 latency-critical
// with the catalog's 6 ms window, 45 standard, 45 best-effort), each with a
// usage file written by the real interposer. "idle": no latency-critical
// work pending; "lc-active": one latency-critical tenant launching 1 ms
// kernels back to back for the whole time; "lc-requests": one
// latency-critical tenant serving a request (8 kernels of 100 us) every 20
// ms. The tenant's process runs the interposer over the fake libcuda as a
// child (its own CPU is not counted). Run with -benchtime 1x (test/bench.sh).
func BenchmarkPublisherCPU(b *testing.B) {
	secs := 10
	if s := os.Getenv("GPUEXT_BENCH_BOARD_SECONDS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			secs = n
		}
	}
	d := time.Duration(secs) * time.Second
	build := buildDevrt(b)
	state := b.TempDir()
	boardPath := filepath.Join(state, "board", FileName)
	var lc []tenant
	for id := 1; id <= 100; id++ {
		class := "best-effort"
		switch {
		case id <= 10:
			class = "latency-critical"
		case id <= 55:
			class = "standard"
		}
		tn := newTenant(b, state, id, class, 6000)
		if class == "latency-critical" {
			lc = append(lc, tn)
		}
		// one launch: the interposer creates the usage file
		launch(b, build, tn, boardPath)
	}
	for _, mode := range []string{"idle", "lc-active", "lc-requests"} {
		b.Run(mode, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				pub := openPublisher(b, state)
				var app *exec.Cmd
				switch mode {
				case "lc-active": // a kernel of 1 ms after another: pending the whole time
					n := int(d/time.Millisecond) + 2000 // outlasts the measurement
					app = exec.Command(filepath.Join(build, "fake", "app_procaddr"), "launch", strconv.Itoa(n))
					app.Env = append(lc[0].env(build, boardPath), "FAKECUDA_KERNEL_US=1000")
				case "lc-requests": // a request (8 kernels of 100 us) every 20 ms: pending a third of the time
					var steps []string
					for i := 0; i < int(d/(20*time.Millisecond))+100; i++ {
						steps = append(steps, "launch", "8", "sleep", "19")
					}
					app = exec.Command(filepath.Join(build, "fake", "app_procaddr"), steps...)
					app.Env = append(lc[0].env(build, boardPath), "FAKECUDA_KERNEL_US=100")
				}
				if app != nil {
					if err := app.Start(); err != nil {
						b.Fatal(err)
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				pub.Run(ctx, time.Millisecond) // settle: first scan, files opened
				cancel()
				reads0, pending := pub.readsSoFar(), 0
				ctx, cancel = context.WithTimeout(context.Background(), d)
				done := make(chan struct{})
				go func() {
					tick := time.NewTicker(time.Second + 7*time.Millisecond) // not in step with the requests
					defer tick.Stop()
					for {
						select {
						case <-done:
							return
						case <-tick.C:
							if until, _ := pub.Board(); until > monotonicNow() {
								pending++
							}
						}
					}
				}()
				c0, t0 := cpuTime(), time.Now()
				pub.Run(ctx, time.Millisecond)
				c, wall := cpuTime()-c0, time.Since(t0)
				close(done)
				cancel()
				if app != nil {
					app.Process.Kill()
					app.Wait()
				}
				samples := int(wall / time.Second)
				if mode == "lc-active" && pending < samples*9/10 {
					b.Errorf("board showed latency-critical work pending in %d of %d samples", pending, samples)
				}
				if mode == "lc-requests" && (pending == 0 || pending == samples) {
					b.Errorf("board showed latency-critical work pending in %d of %d samples, want some", pending, samples)
				}
				if mode == "idle" && pending != 0 {
					b.Errorf("board showed work pending while idle (%d samples)", pending)
				}
				b.ReportMetric(100*c.Seconds()/wall.Seconds(), "cpu-%")
				b.ReportMetric(float64(pub.readsSoFar()-reads0)/wall.Seconds(), "reads/s")
				b.ReportMetric(wall.Seconds(), "s")
				b.Logf("%s: %v CPU over %v (%s)", mode, c, wall.Round(time.Millisecond), fmt.Sprintf("%d reads", pub.readsSoFar()-reads0))
			}
		})
	}
}

// cpuTime is this process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
