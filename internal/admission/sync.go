package admission

import (
	"errors"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
)

// Reconcile is the garbage collector the agent runs periodically, for
// runtime paths that have no Synchronize of their own (the OCI hooks: a runc
// killed between the wrapper's Admit and the hook, or a lost poststop). It
// drops registry entries of the given runtimes whose cgroup (by id) is gone,
// tenants of those runtimes reserved more than grace ago that never got a
// cgroup, and orphaned tenants of any runtime (reserved more than grace ago,
// no cgroup, their key not mapping to them). It returns how many entries it
// dropped.
func (c *Core) Reconcile(grace time.Duration, runtimes ...bpf.Runtime) (dropped int, err error) {
	if c.obs != nil {
		start := time.Now()
		defer func() { c.obs.Reconciled(dropped, err, time.Since(start)) }()
	}
	tenants, err := c.reg.List()
	if err != nil {
		return 0, err
	}
	want := map[bpf.Runtime]bool{}
	prefixes := map[string]bool{}
	for _, r := range runtimes {
		want[r] = true
		prefixes[runtimePrefix(r)+"/"] = true
	}
	var errs []error
	// Where the kernel holds quotas (dmem), every live cgroup's dmem.max is
	// rewritten from its tenant's config: one a runtime or an operator
	// changed comes back within an interval.
	dm, _ := c.resolver.Dmem()
	holdDmem := dm.Controller && len(dm.Regions) > 0
	for _, t := range tenants {
		for _, cg := range t.Cgroups {
			if holdDmem {
				c.applyDmemEntry(t.ID, cg, c.log.WithFields(logrus.Fields{"container": cg.ContainerID, "tenant": t.ID}))
			}
			if !want[cg.Runtime] {
				continue
			}
			// By id, not by the stored path: that is cut to its field size
			// (a live cgroup under a long path looked gone) and a path can
			// be reused by another cgroup.
			exists, err := c.resolver.ExistsByID(cg.CgroupID)
			if err != nil || exists {
				continue // still there, or cannot tell: keep it
			}
			if _, err := c.reg.Detach(cg.CgroupID); err != nil && !errors.Is(err, bpf.ErrNotFound) {
				errs = append(errs, err)
				continue
			}
			dropped++
			c.log.WithFields(logrus.Fields{"container": cg.ContainerID, "tenant": t.ID, "cgroup": cg.CgroupPath}).
				Info("reconcile: dropped entry of a cgroup that is gone")
		}
		key, _, _ := strings.Cut(t.Key, "/")
		// An orphan: its key does not map back to it (a writer killed
		// between claiming the id and mapping the key). No remove can
		// reach it by key, whatever its runtime.
		owner, ok, err := c.reg.LookupKey(t.Key)
		orphan := err == nil && (!ok || owner != t.ID)
		if len(t.Cgroups) == 0 && (prefixes[key+"/"] || orphan) && time.Since(t.Created) > grace {
			if err := c.reg.ReleaseTenant(t.ID); err != nil && !errors.Is(err, bpf.ErrNotFound) {
				errs = append(errs, err)
				continue
			}
			dropped++
			c.log.WithFields(logrus.Fields{"tenant": t.ID, "tenantKey": t.Key}).
				Info("reconcile: released a tenant that never got a cgroup")
		}
	}
	c.gcTenantDirs()
	return dropped, errors.Join(errs...)
}

// decisionOf is the decision stored for a live container (StoredDecision),
// or, when the registry holds none (it was lost), a new one from Admit.
func (c *Core) decisionOf(info ContainerInfo) (Decision, error) {
	d, ok, err := c.StoredDecision(info)
	if err != nil || ok {
		return d, err
	}
	return c.Admit(info)
}

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
		d, err := c.decisionOf(info)
		if err == nil {
			d, _, err = c.Register(info, d)
		}
		if d.TenantKey != "" {
			liveKeys[d.TenantKey] = true
		}
		if err == nil && d.Skipped {
			err = d.Err
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
