package plugin

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/bpf/kernelpolicy"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/devrt/board"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/agent"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/internal/deviceplugin"
	"github.com/gpuext/gpuext/internal/logging"
	"github.com/gpuext/gpuext/internal/memguard"
	"github.com/gpuext/gpuext/internal/metrics"
	"github.com/gpuext/gpuext/policies/probes"
)

// Plugin holds the NRI handlers. The admission core is built at Configure,
// from the base config overlaid with the config the runtime passes.
type Plugin struct {
	base config.Config
	log  *logrus.Entry

	mu        sync.Mutex
	core      *admission.Core
	reg       *bpf.Registry
	admitted  map[string]admission.Decision // decisions of CreateContainer not yet registered
	stopBoard context.CancelFunc            // stops the priority board publisher
	// stopReconcile stops the periodic reconcile
	stopReconcile context.CancelFunc
	api           *agent.Server    // the API the runc wrapper and OCI hooks call
	pub           *board.Publisher // the running board publisher, for the metrics
	metrics       *metrics.Server  // /metrics (metricsAddress), nil when off
	observer      *metrics.Agent   // the agent's own metrics, every core's Observer
	metricsReg    *bpf.Registry    // the metrics' own registry handle
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

// startMetrics serves /metrics once, when the config asks for it
// (metricsAddress; off by default). The tenant collector reads a registry
// handle of its own, so a scrape never uses one a reconfiguration closed.
func (p *Plugin) startMetrics(cfg config.Config) {
	addr := cfg.MetricsListen()
	if addr == "" || p.metrics != nil {
		return
	}
	log := p.log.WithField("metricsAddress", addr)
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
	observer.SetBoard(func() metrics.Board {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.pub == nil {
			return nil
		}
		return p.pub
	})
	observer.SetProbeCatalog(func() *probes.Catalog {
		if core, err := p.admission(); err == nil {
			return core.ProbeCatalog() // built in and the config's probeDir
		}
		return nil
	})
	p.metrics, p.observer, p.metricsReg = srv, observer, reg
	go func() {
		if err := srv.Serve(); err != nil {
			log.WithError(err).Error("metrics server stopped")
		}
	}()
	log.WithField("address", srv.Addr()).Info("serving metrics")
}

// startAPI serves the agent API (internal/agent) for the OCI paths, once:
// it hands each request to the core of the moment. An agent that cannot
// serve it does not run on without it (the runc wrapper and the hooks would
// apply their fail mode to every container, unseen): the error names the
// socket and Configure returns it, so the agent exits.
func (p *Plugin) startAPI(cfg config.Config) error {
	if p.api != nil {
		return nil
	}
	srv, err := agent.Listen(cfg.AgentSocket, func() (agent.Core, error) { return p.admission() }, p.log)
	if err != nil {
		return fmt.Errorf("agent API on %s (agentSocket): %w", cfg.AgentSocket, err)
	}
	p.api = srv
	go func() {
		if err := srv.Serve(); err != nil {
			p.log.WithError(err).Error("agent API stopped")
		}
	}()
	p.log.WithField("socket", cfg.AgentSocket).Info("serving the agent API")
	return nil
}

// startReconcile runs the periodic reconcile: the agent, not an operator
// running gpuextctl gc, collects what killed hooks and runtimes left (OCI
// entries whose cgroup is gone, reservations that never started, orphaned
// tenant ids). NRI containers are kept exact by the plugin's own events and
// Synchronize.
func (p *Plugin) startReconcile(cfg config.Config, core *admission.Core) {
	interval, grace := cfg.Reconcile()
	if interval <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.stopReconcile = cancel
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
			log := p.log.WithFields(logrus.Fields{"dropped": n, "interval": interval.String()})
			if err != nil {
				log.WithError(err).Warn("reconcile finished with errors")
			} else if n > 0 {
				log.Info("reconciled")
			}
		}
	}()
}

// BoardInterval is the shortest gap between two reads of the
// latency-critical tenants' deadlines by the board publisher (which reads on
// their wake FIFOs and a quarter window before a deadline passes).
const BoardInterval = time.Millisecond

// startBoard runs the device runtime's priority board publisher: the plugin
// is the host agent that copies latency-critical tenants' pending work to the
// read-only board every container maps. Which tenants are latency-critical,
// and for how long one launch counts, come from the tenant dirs admission
// wrote (settings.bin), never from what a tenant writes about itself.
func (p *Plugin) startBoard(cfg config.Config) {
	pub, err := board.Open(filepath.Join(cfg.StateDir, "board"), filepath.Join(cfg.StateDir, "acct"),
		board.TenantSettings(admission.TenantsRoot(cfg.StateDir)), p.log)
	if err != nil {
		p.log.WithError(err).Error("priority board: not published")
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.stopBoard = cancel
	p.pub = pub
	go func() {
		defer pub.Close()
		pub.Run(ctx, BoardInterval)
	}()
}

// New returns a plugin using base as its configuration.
func New(base config.Config, log *logrus.Entry) *Plugin {
	return &Plugin{base: base, log: log, admitted: map[string]admission.Decision{}, termLogs: memguard.NewTerminationLogs()}
}

// startMemoryGuard runs the GPU memory guard once (memoryGuard; on unless
// its action is off): gpuext-gpuview --watch samples NVML, and a tenant's
// process that pushes it past its quota is stopped or reported. On a host
// without the driver it says so once and retries with a backoff.
func (p *Plugin) startMemoryGuard(cfg config.Config) {
	action, interval, margin := cfg.MemoryGuardSpec()
	if action == string(memguard.ActionOff) || p.guard != nil {
		return
	}
	log := p.log.WithField("component", "memoryGuard")
	reg, err := bpf.OpenRegistry(cfg.PinDir)
	if err != nil {
		log.WithError(err).Error("GPU memory guard not started: registry")
		return
	}
	res, err := cgroup.NewResolver(cfg.HostRoot)
	if err != nil {
		reg.Close()
		log.WithError(err).Error("GPU memory guard not started: cgroups")
		return
	}
	if err := memguard.HostPIDNamespace(cfg.HostRoot); err != nil {
		reg.Close() // NVML's pids are the host's: from another namespace a pid names another process
		log.WithError(err).Error("GPU memory guard not started")
		return
	}
	gpuview := cfg.GpuviewBinary()
	cgOf := memguard.ResolverCgroup(res)
	r := memguard.NewRunner(memguard.Config{
		Gpuview:  func() (string, error) { return deviceplugin.GpuviewPath(gpuview) },
		Interval: interval,
		Options: memguard.Options{ContextMargin: margin,
			BeforeKill: func(ev memguard.Event) { p.termLogs.Explain(reg, ev, margin, log) }},
		Limits:   memguard.RegistryLimits(reg, cfg.StateDir, memguard.Action(action)),
		CgroupOf: cgOf,
		Killer:   memguard.PidfdKiller{CgroupOf: cgOf},
		Log:      log,
	})
	ctx, cancel := context.WithCancel(context.Background())
	p.guard, p.stopGuard, p.guardReg = r, cancel, reg
	if p.observer != nil {
		p.observer.SetMemoryGuard(r.Status)
	}
	go r.Run(ctx)
}

// Configure builds the admission core; NRI's per-plugin config (JSON, same
// format as the config file) overrides the base config.
func (p *Plugin) Configure(_ context.Context, cfgData, runtime, version string) (api.EventMask, error) {
	cfg, err := config.Overlay(p.base, []byte(cfgData), "from runtime")
	if err != nil {
		p.log.WithError(err).Error("bad plugin config from runtime")
		return 0, err
	}
	if cfg.LogFile != p.base.LogFile || cfg.LogLevel != p.base.LogLevel {
		// A pre-installed plugin learns its log file only here.
		log, _, err := logging.Setup(cfg.LogFile, cfg.LogLevel, "nri-plugin")
		if err != nil {
			p.log.WithError(err).Error("bad log settings in plugin config from runtime")
			return 0, err
		}
		p.log = log
	}
	core, reg, err := admission.Open(cfg, p.log)
	if err != nil {
		p.log.WithError(err).Error("cannot start admission core")
		return 0, err
	}
	go core.WarmProbes()
	p.startMetrics(cfg)
	if p.observer != nil {
		core.SetObserver(p.observer)
	}
	p.startDevicePlugin(cfg, core)
	p.startMemoryGuard(cfg)
	p.mu.Lock()
	if p.reg != nil {
		p.reg.Close()
	}
	if p.stopBoard != nil {
		p.stopBoard()
		p.pub = nil
	}
	if p.stopReconcile != nil {
		p.stopReconcile()
	}
	p.core, p.reg = core, reg
	p.startBoard(cfg)
	p.startReconcile(cfg, core)
	err = p.startAPI(cfg)
	p.mu.Unlock()
	if err != nil {
		p.log.WithError(err).WithField("socket", cfg.AgentSocket).Error("agent API not served: exiting")
		return 0, err
	}
	p.log.WithFields(logrus.Fields{"runtime": runtime, "version": version, "failMode": cfg.FailMode,
		"pinDir": cfg.PinDir, "stateDir": cfg.StateDir}).Info("configured")
	mask := api.MustParseEventMask("CreateContainer", "StartContainer", "RemoveContainer")
	return mask, nil
}

func (p *Plugin) admission() (*admission.Core, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.core == nil {
		return nil, fmt.Errorf("gpuext: plugin not configured")
	}
	return p.core, nil
}

// Synchronize rebuilds the registry from the live containers.
func (p *Plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	core, err := p.admission()
	if err != nil {
		return nil, err
	}
	byID := make(map[string]*api.PodSandbox, len(pods))
	for _, pod := range pods {
		byID[pod.GetId()] = pod
	}
	live := make([]admission.ContainerInfo, 0, len(ctrs))
	for _, c := range ctrs {
		switch c.GetState() {
		case api.ContainerState_CONTAINER_CREATED, api.ContainerState_CONTAINER_RUNNING, api.ContainerState_CONTAINER_PAUSED:
			live = append(live, ContainerInfo(byID[c.GetPodSandboxId()], c))
		}
	}
	for _, c := range ctrs {
		p.termLogs.Note(c.GetId(), terminationLog(c))
	}
	rep, err := core.Synchronize(bpf.RuntimeNRI, live)
	p.log.WithFields(logrus.Fields{"pods": len(pods), "containers": len(ctrs), "registered": rep.Registered,
		"failed": rep.Failed, "dropped": rep.Dropped}).Info("synchronized")
	if err != nil {
		p.log.WithError(err).Warn("synchronize finished with errors")
	}
	return nil, nil
}

// CreateContainer admits the container and returns its injection. The
// core has applied the fail mode: an error refuses the container (strict),
// a skipped decision lets it start without gpuext (fail-open).
func (p *Plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	core, err := p.admission()
	info := ContainerInfo(pod, ctr)
	if err != nil {
		return nil, nil, p.noCore(info, p.log.WithField("container", ctr.GetId()), "admit", err)
	}
	d, err := core.Admit(info)
	if err != nil {
		return nil, nil, err
	}
	if d.Skipped {
		return nil, nil, nil
	}
	p.termLogs.Note(ctr.GetId(), terminationLog(ctr))
	p.mu.Lock()
	p.admitted[ctr.GetId()] = d
	p.mu.Unlock()
	return Adjustment(d.Injection), nil, nil
}

// StartContainer registers the container's cgroup under the decision its
// CreateContainer made (or, after a plugin restart, the one stored in the
// registry). containerd 2.x creates the task, and with it the cgroup, only
// now; the user's process has not run yet (runc holds it until the task
// starts). PostCreateContainer would come before the cgroup exists, so the
// plugin does not subscribe to it: measured, that extra round trip cost
// 3-4% of a crictl create+start. In strict mode a failure fails the start.
func (p *Plugin) StartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	return p.register(pod, ctr)
}

func (p *Plugin) register(pod *api.PodSandbox, ctr *api.Container) error {
	info := ContainerInfo(pod, ctr)
	log := p.log.WithFields(logrus.Fields{"container": ctr.GetId(), "name": ctr.GetName(), "event": "StartContainer"})
	core, err := p.admission()
	if err != nil {
		return p.noCore(info, log, "register", err)
	}
	p.mu.Lock()
	d, known := p.admitted[ctr.GetId()]
	delete(p.admitted, ctr.GetId())
	p.mu.Unlock()
	if !known { // admitted before a plugin restart, or skipped (fail-open)
		_, _, err = core.RegisterStored(info)
		return err
	}
	_, _, err = core.Register(info, d)
	return err
}

// noCore applies the configured fail mode to an error that comes before
// the core exists (the core applies it to its own).
func (p *Plugin) noCore(info admission.ContainerInfo, log *logrus.Entry, step string, err error) error {
	_, err = admission.ApplyFailMode(p.base.FailMode, info, log, step, err)
	return err
}

// RemoveContainer detaches the container and releases an empty tenant.
func (p *Plugin) RemoveContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	core, err := p.admission()
	if err != nil {
		return err
	}
	p.mu.Lock()
	delete(p.admitted, ctr.GetId())
	p.mu.Unlock()
	p.termLogs.Forget(ctr.GetId())
	if err := core.Remove(ContainerInfo(pod, ctr)); err != nil {
		p.log.WithField("container", ctr.GetId()).WithError(err).Error("remove container")
	}
	return nil
}

// Shutdown stops the agent API (in-flight requests finish), the board and
// reconcile, and closes the registry handle; pinned state stays.
func (p *Plugin) Shutdown(context.Context) {
	p.mu.Lock()
	api, ms, mreg := p.api, p.metrics, p.metricsReg
	p.api, p.metrics, p.metricsReg = nil, nil, nil
	stopGuard, greg := p.stopGuard, p.guardReg
	p.stopGuard, p.guardReg, p.guard = nil, nil, nil
	p.mu.Unlock()
	if stopGuard != nil {
		stopGuard()
		greg.Close()
	}
	if api != nil {
		api.Close() // its requests take p.mu
	}
	if ms != nil {
		ms.Close() // a scrape reads the board under p.mu
		mreg.Close()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopBoard != nil {
		p.stopBoard()
		p.stopBoard = nil
		p.pub = nil
	}
	if p.stopReconcile != nil {
		p.stopReconcile()
		p.stopReconcile = nil
	}
	p.stopDevicePluginLocked()
	if p.reg != nil {
		p.reg.Close()
		p.reg = nil
		p.core = nil
	}
	p.log.Info("shutdown")
}
