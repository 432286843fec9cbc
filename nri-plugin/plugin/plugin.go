package plugin

import (
	"context"
	"sync"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/hostagent"
)

// Plugin is the NRI adapter: its handlers turn containerd's events into
// calls of the host agent (internal/hostagent) and its admission core. The
// only state it keeps is NRI's own: the decisions CreateContainer made that
// StartContainer has yet to register.
type Plugin struct {
	agent *hostagent.Agent

	mu       sync.Mutex
	admitted map[string]admission.Decision
}

// New returns the NRI adapter of a.
func New(a *hostagent.Agent) *Plugin {
	return &Plugin{agent: a, admitted: map[string]admission.Decision{}}
}

// Configure reconfigures the agent: NRI's per-plugin config (JSON, the
// config file's format) overrides the base config; the first call starts
// the agent's services.
func (p *Plugin) Configure(_ context.Context, cfgData, runtime, version string) (api.EventMask, error) {
	if err := p.agent.Reconfigure(cfgData, runtime, version); err != nil {
		return 0, err
	}
	return api.MustParseEventMask("CreateContainer", "StartContainer", "RemoveContainer"), nil
}

// Synchronize rebuilds the registry from the live containers.
func (p *Plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	core, err := p.agent.Core()
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
		p.agent.TerminationLogs().Note(c.GetId(), terminationLog(c))
	}
	rep, err := core.Synchronize(bpf.RuntimeNRI, live)
	log := p.agent.Log()
	log.WithFields(logrus.Fields{"pods": len(pods), "containers": len(ctrs), "registered": rep.Registered,
		"failed": rep.Failed, "dropped": rep.Dropped}).Info("synchronized")
	if err != nil {
		log.WithError(err).Warn("synchronize finished with errors")
	}
	return nil, nil
}

// CreateContainer admits the container and returns its injection. The
// core has applied the fail mode: an error refuses the container (strict),
// a skipped decision lets it start without gpuext (fail-open).
func (p *Plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	core, err := p.agent.Core()
	info := ContainerInfo(pod, ctr)
	if err != nil {
		return nil, nil, p.noCore(info, p.agent.Log().WithField("container", ctr.GetId()), "admit", err)
	}
	d, err := core.Admit(info)
	if err != nil {
		return nil, nil, err
	}
	if d.Skipped {
		return nil, nil, nil
	}
	p.agent.TerminationLogs().Note(ctr.GetId(), terminationLog(ctr))
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
	info := ContainerInfo(pod, ctr)
	core, err := p.agent.Core()
	if err != nil {
		log := p.agent.Log().WithFields(logrus.Fields{"container": ctr.GetId(), "name": ctr.GetName(), "event": "StartContainer"})
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
	_, err = admission.ApplyFailMode(p.agent.FailMode(), info, log, step, err)
	return err
}

// RemoveContainer detaches the container and releases an empty tenant.
func (p *Plugin) RemoveContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	core, err := p.agent.Core()
	if err != nil {
		return err
	}
	p.mu.Lock()
	delete(p.admitted, ctr.GetId())
	p.mu.Unlock()
	p.agent.TerminationLogs().Forget(ctr.GetId())
	if err := core.Remove(ContainerInfo(pod, ctr)); err != nil {
		p.agent.Log().WithField("container", ctr.GetId()).WithError(err).Error("remove container")
	}
	return nil
}
