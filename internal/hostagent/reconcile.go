package hostagent

import (
	"context"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/config"
)

// startReconcileLocked (a.mu held) runs the periodic reconcile: the agent
// collects what killed hooks and runtimes left (OCI entries whose cgroup is
// gone, reservations that never started, orphaned tenant ids); `gpuextctl
// gc` asks it for one more round through the API. NRI containers are kept
// exact by the adapter's events and Synchronize.
func (a *Agent) startReconcileLocked(cfg config.Config, core *admission.Core) {
	interval, grace := cfg.Reconcile()
	if interval <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.stopReconcile = cancel
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			n, err := core.Reconcile(grace, bpf.RuntimeOCIHook, bpf.RuntimeRuncWrapper)
			log := a.Log().WithFields(logrus.Fields{"dropped": n, "interval": interval.String()})
			if err != nil {
				log.WithError(err).Warn("reconcile finished with errors")
			} else if n > 0 {
				log.Info("reconciled")
			}
		}
	}()
}
