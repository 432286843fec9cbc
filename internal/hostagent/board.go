package hostagent

import (
	"context"
	"path/filepath"
	"time"

	"github.com/gpuext/gpuext/devrt/board"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/config"
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
	a.stopBoard, a.pub = cancel, pub
	go func() {
		defer pub.Close()
		pub.Run(ctx, BoardInterval)
	}()
}

// stopBoardLocked (a.mu held) stops the publisher, if one runs.
func (a *Agent) stopBoardLocked() {
	if a.stopBoard != nil {
		a.stopBoard()
		a.stopBoard, a.pub = nil, nil
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
