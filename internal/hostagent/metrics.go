package hostagent

import (
	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/bpf/kernelpolicy"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/internal/deviceplugin"
	"github.com/gpuext/gpuext/internal/metrics"
)

// startMetrics serves /metrics once, when the config asks for it
// (metricsAddress; off by default). The tenant collector reads a registry
// handle of its own, so a scrape never uses one a reconfiguration closed.
func (a *Agent) startMetrics(cfg config.Config) {
	addr := cfg.MetricsListen()
	if addr == "" || a.metrics != nil {
		return
	}
	log := a.Log().WithField("metricsAddress", addr)
	reg, err := bpf.OpenRegistry(cfg.PinDir)
	if err != nil {
		log.WithError(err).Error("metrics not served: registry")
		return
	}
	gpuview := cfg.GpuviewBinary() // else beside the agent, else PATH
	r, observer := metrics.NewRegistry(reg, cfg.StateDir, kernelpolicy.DefaultCore(), metrics.NVMLOptions{
		Gpuview:  func() (string, error) { return deviceplugin.GpuviewPath(gpuview) },
		HostRoot: cfg.HostRoot, Log: log,
	})
	srv, err := metrics.Listen(addr, r)
	if err != nil {
		reg.Close()
		log.WithError(err).Error("metrics not served")
		return
	}
	observer.SetBoard(a.board)
	observer.SetLatency(a.latencyStatus)
	observer.SetProbeCatalog(func() *programs.Catalog {
		if core, err := a.Core(); err == nil {
			return core.ProbeCatalog() // built in and the config's probeDir
		}
		return nil
	})
	a.metrics, a.observer, a.metricsReg = srv, observer, reg
	go func() {
		if err := srv.Serve(); err != nil {
			log.WithError(err).Error("metrics server stopped")
		}
	}()
	log.WithField("address", srv.Addr()).Info("serving metrics")
}
