package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gpuext/gpuext/devrt/board"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/internal/latency"
)

// runBoard refuses to publish a second priority board beside the agent's,
// which publishes the board of its stateDir itself (internal/hostagent).
// --standalone publishes one where no agent runs: the device runtime run by
// hand outside containers, on tenant dirs written by `gpuextctl settings
// write` (the GPU tests' priority sections, which measure the launch gate
// at other --interval values and with --trace); it refuses when an agent
// answers at agentSocket.
func runBoard(cfg config.Config, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("board", flag.ContinueOnError)
	standalone := fs.Bool("standalone", false, "publish the board without an agent (the device runtime run by hand, no container runtime); refused while an agent answers at --socket")
	socket := fs.String("socket", cfg.AgentSocket, "the agent's API socket (--standalone refuses to run beside an agent answering there)")
	interval := fs.Duration("interval", time.Millisecond, "shortest gap between two reads of the latency-critical tenants' deadlines (the publisher reads on their wake FIFOs and a quarter window before a deadline passes, not on a clock)")
	control := fs.Bool("latency-control", true, "also run the latency controller (latency-critical tenants' latencyTarget: the share of best-effort contexts and the pacing of their launches; status in STATEDIR/latency.json)")
	trace := fs.String("trace", "", "write a line per read of a latency-critical tenant's deadline to this file (NOW TENANT WHY DEADLINE PUBLISHED BUSY, monotonic ns; for diagnosing the launch gate)")
	if err := parseFlags(fs, args, out); err != nil {
		return err
	}
	if !*standalone {
		return fmt.Errorf("board: the agent publishes the priority board of its stateDir itself (gpuext-nri-plugin, " +
			"with --nri=false on Docker/podman hosts; docs/host-agent.md): no second publisher is needed. " +
			"Only where no agent runs (the device runtime run by hand) does `gpuextctl board --standalone` publish one")
	}
	if agentAnswers(*socket) {
		return fmt.Errorf("board --standalone: a gpuext agent answers at %s and publishes the board of its stateDir: "+
			"a second publisher would fight it (stop the agent, or name another socket with --socket)", *socket)
	}
	pub, err := board.Open(filepath.Join(cfg.StateDir, "board"), filepath.Join(cfg.StateDir, "acct"),
		board.TenantSettings(admission.TenantsRoot(cfg.StateDir)), nil)
	if err != nil {
		return err
	}
	defer pub.Close()
	if *trace != "" {
		f, err := os.Create(*trace)
		if err != nil {
			return fmt.Errorf("--trace: %w", err)
		}
		w := bufio.NewWriterSize(f, 1<<20)
		defer f.Close()
		defer w.Flush()
		pub.SetTrace(w)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(out, "publishing %s (Ctrl-C stops)\n", filepath.Join(cfg.StateDir, "board", board.FileName))
	done := make(chan struct{})
	if *control {
		if spec := cfg.LatencyControlSpec(); !spec.On {
			close(done)
		} else {
			ctl := latency.New(latency.Config{Budget: float64(spec.Budget), StallAfter: spec.StallAfter, PaceDepth: spec.PaceDepth},
				board.TenantSettings(admission.TenantsRoot(cfg.StateDir)), filepath.Join(cfg.StateDir, "acct"), pub, nil)
			ctl.SetStatusFile(latency.StatusPath(cfg.StateDir))
			ctl.SetStateFile(latency.StatePath(cfg.StateDir))
			go func() { defer close(done); ctl.Run(ctx) }()
		}
	} else {
		close(done)
	}
	pub.Run(ctx, *interval)
	<-done
	return nil
}
