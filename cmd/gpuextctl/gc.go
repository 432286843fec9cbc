package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/gpuext/gpuext/internal/agentapi"
	"github.com/gpuext/gpuext/internal/config"
)

// gc asks the agent for one reconcile round now (the one it runs every
// reconcileInterval): the agent owns the registry and its core; gpuextctl
// builds no core of its own.
func gc(cfg config.Config, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("gc", flag.ContinueOnError)
	grace := fs.Duration("grace", 10*time.Minute, "release reserved tenants without a cgroup only after this long")
	all := fs.Bool("all", false, "also entries of the NRI plugin (normally its Synchronize keeps them)")
	socket := fs.String("socket", cfg.AgentSocket, "the agent's API socket")
	timeout := fs.Duration("timeout", 60*time.Second, "how long to wait for the agent's round")
	if err := parseFlags(fs, args, out); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("gc: unexpected argument %q (gpuextctl gc --help lists its flags)", fs.Arg(0))
	}
	if *grace < 0 {
		return fmt.Errorf("gc: --grace %s: want 0 or more", *grace)
	}
	n, err := agentapi.NewClient(*socket, *timeout).GC(agentapi.GCRequest{Grace: *grace, All: *all})
	var oe *net.OpError
	if errors.Is(err, agentapi.ErrUnavailable) && errors.As(err, &oe) && oe.Op == "dial" {
		return fmt.Errorf("gc: %w", agentDown(*socket, err))
	}
	fmt.Fprintf(out, "dropped %d stale entries\n", n)
	if err != nil {
		return fmt.Errorf("gc: %w", err)
	}
	return nil
}
