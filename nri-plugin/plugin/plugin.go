package plugin

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/internal/logging"
)

// Plugin holds the NRI handlers. The admission core is built at Configure,
// from the base config overlaid with the config the runtime passes.
type Plugin struct {
	base config.Config
	log  *logrus.Entry

	mu         sync.Mutex
	core       *admission.Core
	reg        *bpf.Registry
	registered map[string]bool // containers whose cgroup is attached
}

// New returns a plugin using base as its configuration.
func New(base config.Config, log *logrus.Entry) *Plugin {
	return &Plugin{base: base, log: log, registered: map[string]bool{}}
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
	core, reg, err := cfg.OpenCore(p.log)
	if err != nil {
		p.log.WithError(err).Error("cannot start admission core")
		return 0, err
	}
	p.mu.Lock()
	if p.reg != nil {
		p.reg.Close()
	}
	p.core, p.reg = core, reg
	p.mu.Unlock()
	p.log.WithFields(logrus.Fields{"runtime": runtime, "version": version, "failMode": cfg.FailMode,
		"pinDir": cfg.PinDir, "stateDir": cfg.StateDir}).Info("configured")
	mask := api.MustParseEventMask("CreateContainer", "PostCreateContainer", "StartContainer", "RemoveContainer")
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
	rep, err := core.Synchronize(bpf.RuntimeNRI, live)
	p.mu.Lock()
	p.registered = map[string]bool{}
	for _, c := range live {
		p.registered[c.ID] = true
	}
	p.mu.Unlock()
	p.log.WithFields(logrus.Fields{"pods": len(pods), "containers": len(ctrs), "registered": rep.Registered,
		"failed": rep.Failed, "dropped": rep.Dropped}).Info("synchronized")
	if err != nil {
		p.log.WithError(err).Warn("synchronize finished with errors")
	}
	return nil, nil
}

// CreateContainer admits the container and returns its injection. In strict
// mode a bad request fails the creation with the keyed error.
func (p *Plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	core, err := p.admission()
	if err != nil {
		return nil, nil, err
	}
	d, err := core.Admit(ContainerInfo(pod, ctr))
	if err != nil {
		return nil, nil, err
	}
	return Adjustment(d.Injection), nil, nil
}

// PostCreateContainer registers the container's cgroup: runc has created it,
// the user's process has not run yet.
func (p *Plugin) PostCreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	p.register(pod, ctr, "PostCreateContainer")
	return nil
}

// StartContainer registers the cgroup if PostCreateContainer could not.
func (p *Plugin) StartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	p.mu.Lock()
	done := p.registered[ctr.GetId()]
	p.mu.Unlock()
	if !done {
		p.register(pod, ctr, "StartContainer")
	}
	return nil
}

func (p *Plugin) register(pod *api.PodSandbox, ctr *api.Container, event string) {
	core, err := p.admission()
	if err != nil {
		p.log.WithError(err).Error(event)
		return
	}
	if _, _, err := core.Register(ContainerInfo(pod, ctr)); err != nil {
		if event == "PostCreateContainer" && errors.Is(err, cgroup.ErrNotExist) {
			// containerd creates the task (and so the cgroup) only at
			// StartContainer, which is still before the process runs.
			p.log.WithFields(logrus.Fields{"container": ctr.GetId(), "name": ctr.GetName()}).
				Debug("cgroup not created yet; registering at StartContainer")
			return
		}
		p.log.WithFields(logrus.Fields{"container": ctr.GetId(), "name": ctr.GetName(), "event": event}).
			WithError(err).Error("register tenant cgroup")
		return
	}
	p.mu.Lock()
	p.registered[ctr.GetId()] = true
	p.mu.Unlock()
}

// RemoveContainer detaches the container and releases an empty tenant.
func (p *Plugin) RemoveContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	core, err := p.admission()
	if err != nil {
		return err
	}
	p.mu.Lock()
	delete(p.registered, ctr.GetId())
	p.mu.Unlock()
	if err := core.Remove(ContainerInfo(pod, ctr)); err != nil {
		p.log.WithField("container", ctr.GetId()).WithError(err).Error("remove container")
	}
	return nil
}

// Shutdown closes the registry handle; pinned state stays.
func (p *Plugin) Shutdown(context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reg != nil {
		p.reg.Close()
		p.reg = nil
		p.core = nil
	}
	p.log.Info("shutdown")
}
