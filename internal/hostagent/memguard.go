package hostagent

import (
	"context"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/internal/deviceplugin"
	"github.com/gpuext/gpuext/internal/memguard"
)

// startMemoryGuard runs the GPU memory guard once (memoryGuard; on unless
// its action is off): gpuext-gpuview --watch samples NVML, and a tenant's
// process that pushes it past its quota is stopped or reported, the reason
// written to its container's termination-message file (TerminationLogs).
// On a host without the driver it says so once and retries with a backoff.
func (a *Agent) startMemoryGuard(cfg config.Config) {
	action, interval, margin := cfg.MemoryGuardSpec()
	if action == string(memguard.ActionOff) || a.guard != nil {
		return
	}
	log := a.Log().WithField("component", "memoryGuard")
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
			BeforeKill: func(ev memguard.Event) { a.termLogs.Explain(reg, ev, margin, log) }},
		Limits:   memguard.RegistryLimits(reg, cfg.StateDir, memguard.Action(action)),
		CgroupOf: cgOf,
		Killer:   memguard.PidfdKiller{CgroupOf: cgOf},
		Log:      log,
	})
	ctx, cancel := context.WithCancel(context.Background())
	a.guard, a.stopGuard, a.guardReg = r, cancel, reg
	if a.observer != nil {
		a.observer.SetMemoryGuard(r.Status)
	}
	go r.Run(ctx)
}
