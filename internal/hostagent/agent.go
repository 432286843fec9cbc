package hostagent

import (
	"context"
	"errors"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/board"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/agent"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/internal/deviceplugin"
	"github.com/gpuext/gpuext/internal/failmode"
	"github.com/gpuext/gpuext/internal/kubeowner"
	"github.com/gpuext/gpuext/internal/latency"
	"github.com/gpuext/gpuext/internal/logging"
	"github.com/gpuext/gpuext/internal/memguard"
	"github.com/gpuext/gpuext/internal/metrics"
)

// ErrNotStarted: a container event or an API request came before the
// agent's first Start or Reconfigure built an admission core.
var ErrNotStarted = errors.New("gpuext: agent not started (no admission core yet)")

// Agent owns the host agent's services. Its zero value is not usable: New
// makes one.
type Agent struct {
	base  config.Config
	owner *kubeowner.Watcher // nil without --owner-daemonset

	mu  sync.Mutex
	log *logrus.Entry
	// rebuilt at every Reconfigure
	core          *admission.Core
	reg           *bpf.Registry
	pub           *board.Publisher    // the running board publisher, for the metrics
	lat           *latency.Controller // the running latency controller (nil: off)
	stopBoard     context.CancelFunc
	stopReconcile context.CancelFunc
	// started once, at the first Start or Reconfigure
	api        *agent.Server   // the API the runc wrapper, the OCI hooks and gpuextctl call
	metrics    *metrics.Server // /metrics (metricsAddress), nil when off
	observer   *metrics.Agent  // the agent's own metrics, every core's Observer
	metricsReg *bpf.Registry   // the metrics' own registry handle
	// the device plugin (devicePlugin): the kubelet's pod-resources API,
	// every core's GPU memory source, and what stops the plugin
	podResources     *deviceplugin.PodResources
	stopDevicePlugin context.CancelFunc
	// the GPU memory guard (memoryGuard): its runner, registry handle, and
	// the containers' termination-message files, where a stop's reason goes
	guard     *memguard.Runner
	stopGuard context.CancelFunc
	guardReg  *bpf.Registry
	termLogs  *memguard.TerminationLogs
}

// New returns an agent whose services will run from base (overlaid by what
// a runtime passes to Reconfigure). Nothing starts before Start or
// Reconfigure; WatchOwner starts the owner watch.
func New(base config.Config, log *logrus.Entry) *Agent {
	return &Agent{base: base, log: log, termLogs: memguard.NewTerminationLogs()}
}

// Start starts the services from the base config: the agent without a
// runtime that configures it (Docker and podman hosts, --nri=false).
func (a *Agent) Start() error {
	return a.apply(a.base, "none", "")
}

// Reconfigure overlays the runtime's config (JSON, the config file's
// format; "" keeps the base) on the base config and rebuilds the admission
// core, the board publisher and the reconcile from it; the first call
// starts every service. containerd calls it through the NRI adapter's
// Configure, when it starts or restarts the plugin.
func (a *Agent) Reconfigure(runtimeCfg, runtime, version string) error {
	cfg, err := config.Overlay(a.base, []byte(runtimeCfg), "from runtime")
	if err != nil {
		a.Log().WithError(err).Error("bad plugin config from runtime")
		return err
	}
	if cfg.LogFile != a.base.LogFile || cfg.LogLevel != a.base.LogLevel {
		// A pre-installed plugin learns its log file only here.
		log, _, err := logging.Setup(cfg.LogFile, cfg.LogLevel, "nri-plugin")
		if err != nil {
			a.Log().WithError(err).Error("bad log settings in plugin config from runtime")
			return err
		}
		a.mu.Lock()
		a.log = log
		a.mu.Unlock()
	}
	return a.apply(cfg, runtime, version)
}

// apply builds a core from cfg, starts the services that run once, and
// swaps the core, the board and the reconcile for new ones.
func (a *Agent) apply(cfg config.Config, runtime, version string) error {
	log := a.Log()
	core, reg, err := admission.Open(cfg, log)
	if err != nil {
		log.WithError(err).Error("cannot start admission core")
		return err
	}
	go core.WarmProbes()
	a.startMetrics(cfg)
	if a.observer != nil {
		core.SetObserver(a.observer)
	}
	a.startDevicePlugin(cfg, core)
	a.startMemoryGuard(cfg)
	a.mu.Lock()
	if a.reg != nil {
		a.reg.Close()
	}
	a.stopBoardLocked()
	if a.stopReconcile != nil {
		a.stopReconcile()
	}
	a.core, a.reg = core, reg
	a.startBoardLocked(cfg)
	a.startReconcileLocked(cfg, core)
	err = a.startAPILocked(cfg)
	a.mu.Unlock()
	if err != nil {
		log.WithError(err).WithField("socket", cfg.AgentSocket).Error("agent API not served: exiting")
		return err
	}
	log.WithFields(logrus.Fields{"runtime": runtime, "version": version, "failMode": cfg.FailMode,
		"pinDir": cfg.PinDir, "stateDir": cfg.StateDir}).Info("configured")
	return nil
}

// Core is the admission core of the moment (ErrNotStarted before the first
// Start or Reconfigure).
func (a *Agent) Core() (*admission.Core, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.core == nil {
		return nil, ErrNotStarted
	}
	return a.core, nil
}

// Log is the agent's logger (a runtime's config may have moved it).
func (a *Agent) Log() *logrus.Entry {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.log
}

// FailMode is the base config's fail mode: what an adapter applies to an
// error that comes before a core exists (the core applies it to its own).
func (a *Agent) FailMode() failmode.Mode { return a.base.FailMode }

// TerminationLogs are the containers' termination-message files, where the
// memory guard writes why it stopped a process; the runtime adapter notes
// them as containers come and go.
func (a *Agent) TerminationLogs() *memguard.TerminationLogs { return a.termLogs }

// Stop stops the agent API (in-flight requests finish), the memory guard,
// the metrics, the board, the reconcile and the device plugin, and closes
// the registry handles; pinned state stays, unless the owner watch saw the
// agent's DaemonSet deleted (an uninstall: the node is emptied).
func (a *Agent) Stop() {
	a.mu.Lock()
	api, ms, mreg := a.api, a.metrics, a.metricsReg
	a.api, a.metrics, a.metricsReg = nil, nil, nil
	stopGuard, greg := a.stopGuard, a.guardReg
	a.stopGuard, a.guardReg, a.guard = nil, nil, nil
	a.mu.Unlock()
	if stopGuard != nil {
		stopGuard()
		greg.Close()
	}
	if api != nil {
		api.Close() // its requests take a.mu
	}
	if ms != nil {
		ms.Close() // a scrape reads the board under a.mu
		mreg.Close()
	}
	a.mu.Lock()
	a.stopBoardLocked()
	if a.stopReconcile != nil {
		a.stopReconcile()
		a.stopReconcile = nil
	}
	a.stopDevicePluginLocked()
	if a.reg != nil {
		a.reg.Close()
		a.reg = nil
		a.core = nil
	}
	log := a.log
	a.mu.Unlock()
	log.Info("shutdown")
	a.cleanIfUninstalled(log)
}
