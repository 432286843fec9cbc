package hostagent

import (
	"context"
	"path/filepath"
	"time"

	"github.com/gpuext/gpuext/devrt/board"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/internal/latency"
	"github.com/gpuext/gpuext/internal/metrics"
)

// BoardInterval is the shortest gap between two reads of the
// latency-critical tenants' deadlines by the board publisher (which reads on
// their wake FIFOs and a quarter window before a deadline passes).
const BoardInterval = time.Millisecond

// startBoardLocked (a.mu held) runs the device runtime's priority board
// publisher: the agent copies latency-critical tenants' pending work to the
// read-only board every container maps. Which tenants are latency-critical,
// and for how long one launch counts, come from the tenant dirs admission
// wrote (settings.bin), never from what a tenant writes about itself.
func (a *Agent) startBoardLocked(cfg config.Config) {
	pub, err := board.Open(filepath.Join(cfg.StateDir, "board"), filepath.Join(cfg.StateDir, "acct"),
		board.TenantSettings(admission.TenantsRoot(cfg.StateDir)), a.log)
	if err != nil {
		a.log.WithError(err).Error("priority board: not published")
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.stopBoard, a.pub, a.lat = cancel, pub, nil
	var ctl *latency.Controller
	if spec := cfg.LatencyControlSpec(); spec.On {
		// the latency controller publishes through the same board: it
		// stops (and clears its fields) before the board is closed
		ctl = latency.New(latency.Config{Budget: float64(spec.Budget), StallAfter: spec.StallAfter, PaceDepth: spec.PaceDepth},
			board.TenantSettings(admission.TenantsRoot(cfg.StateDir)), filepath.Join(cfg.StateDir, "acct"), pub, a.log)
		ctl.SetStatusFile(latency.StatusPath(cfg.StateDir))
		ctl.SetStateFile(latency.StatePath(cfg.StateDir)) // solo bases and the budget survive a restart
		a.lat = ctl
	}
	go func() {
		defer pub.Close()
		done := make(chan struct{})
		if ctl != nil {
			go func() { defer close(done); ctl.Run(ctx) }()
		} else {
			close(done)
		}
		pub.Run(ctx, BoardInterval)
		<-done
	}()
}

// latencyStatus is the running latency controller's status, for the
// metrics (false when none runs).
func (a *Agent) latencyStatus() (latency.Status, bool) {
	a.mu.Lock()
	ctl := a.lat
	a.mu.Unlock()
	if ctl == nil {
		return latency.Status{}, false
	}
	return ctl.Status(), true
}

// stopBoardLocked (a.mu held) stops the publisher, if one runs.
func (a *Agent) stopBoardLocked() {
	if a.stopBoard != nil {
		a.stopBoard()
		a.stopBoard, a.pub, a.lat = nil, nil, nil
	}
}

// board is the running publisher for the metrics (nil when none runs).
func (a *Agent) board() metrics.Board {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pub == nil {
		return nil
	}
	return a.pub
}
