package admission

import (
	"errors"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
)

// SyncReport says what Synchronize changed.
type SyncReport struct {
	Registered int // live containers (re)registered
	Failed     int // live containers that could not be registered
	Dropped    int // stale cgroup entries and tenants removed
}

// Synchronize makes the registry hold exactly the live containers of one
// runtime path (NRI, or the OCI hooks): it (re)registers every live container
// and drops entries of that runtime whose container is gone. Entries of the
// other runtime path are left alone.
func (c *Core) Synchronize(runtime bpf.Runtime, live []ContainerInfo) (SyncReport, error) {
	var rep SyncReport
	var errs []error
	liveIDs := make(map[string]bool, len(live))
	liveKeys := make(map[string]bool, len(live))
	for _, info := range live {
		info.Runtime = runtime
		liveIDs[info.ID] = true
		d, _, err := c.Register(info)
		if d.TenantKey != "" {
			liveKeys[d.TenantKey] = true
		}
		if err != nil {
			rep.Failed++
			c.log.WithFields(logrus.Fields{"container": info.ID, "name": info.Name}).WithError(err).
				Warn("synchronize: could not register live container")
			continue
		}
		rep.Registered++
	}
	tenants, err := c.reg.List()
	if err != nil {
		return rep, err
	}
	prefix := runtimePrefix(runtime) + "/"
	for _, t := range tenants {
		for _, cg := range t.Cgroups {
			if cg.Runtime != runtime || liveIDs[cg.ContainerID] {
				continue
			}
			if _, err := c.reg.Detach(cg.CgroupID); err != nil && !errors.Is(err, bpf.ErrNotFound) {
				errs = append(errs, err)
				continue
			}
			rep.Dropped++
			c.log.WithFields(logrus.Fields{"container": cg.ContainerID, "tenant": t.ID, "cgroupID": cg.CgroupID}).
				Info("synchronize: dropped stale cgroup")
		}
		// Tenants reserved at create whose container never came up.
		if strings.HasPrefix(t.Key, prefix) && !liveKeys[t.Key] {
			if err := c.reg.ReleaseTenant(t.ID); err != nil && !errors.Is(err, bpf.ErrNotFound) {
				errs = append(errs, err)
				continue
			}
			rep.Dropped++
			c.log.WithFields(logrus.Fields{"tenant": t.ID, "tenantKey": t.Key}).Info("synchronize: dropped stale tenant")
		}
	}
	c.gcTenantDirs()
	return rep, errors.Join(errs...)
}
