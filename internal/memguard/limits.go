package memguard

import (
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/internal/admission"
)

// Lister lists the registry's tenants (*bpf.Registry).
type Lister interface {
	List() ([]bpf.Tenant, error)
}

// RegistryLimits returns a Limits function over the registry's tenants and
// their tenant files under stateDir, which admission wrote: the quota on
// each GPU comes from the tenant file (the scheduler's per-GPU quotas, or
// one quota on every GPU), never from anything a tenant wrote. action is
// the node's (memoryGuard.action); a policy's memory.quotaAction, carried
// in the tenant file, takes its place for that tenant. A tenant whose file cannot be read is
// held to the registry's quota on every GPU.
//
// A tenant file is read again only when it changed (admission replaces it
// by a rename: a new inode), so a refresh costs one lstat per tenant.
func RegistryLimits(reg Lister, stateDir string, action Action) func() ([]Limit, error) {
	type stamp struct {
		ino, size uint64
		mtime     int64
	}
	type cached struct {
		at     stamp
		quota  uint64
		gpus   map[int]uint64
		action Action
	}
	cache := map[bpf.TenantID]cached{}
	return func() ([]Limit, error) {
		ts, err := reg.List()
		if err != nil {
			return nil, err
		}
		out := make([]Limit, 0, len(ts))
		live := make(map[bpf.TenantID]bool, len(ts))
		for _, t := range ts {
			live[t.ID] = true
			l := Limit{Tenant: t.ID, Key: t.Key, Policy: t.Policy, Quota: t.Config.QuotaBytes, Action: action}
			var st unix.Stat_t
			path := filepath.Join(admission.TenantDir(stateDir, uint64(t.ID)), tenantcfg.ConfigFileName)
			if err := unix.Lstat(path, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
				at := stamp{ino: st.Ino, size: uint64(st.Size), mtime: st.Mtim.Nano()}
				c, ok := cache[t.ID]
				if !ok || c.at != at {
					c = cached{at: at, quota: t.Config.QuotaBytes}
					if tf, err := admission.ReadTenantFile(stateDir, uint64(t.ID)); err == nil {
						c.quota = tf.QuotaBytes
						if a, err := ParseAction(tf.QuotaAction); err == nil && tf.QuotaAction != "" {
							c.action = a
						}
						if len(tf.GPUs) > 0 && len(tf.GPUs) == len(tf.GPUQuotaBytes) {
							c.gpus = make(map[int]uint64, len(tf.GPUs))
							for i, g := range tf.GPUs {
								c.gpus[g] = tf.GPUQuotaBytes[i]
							}
						}
					}
					cache[t.ID] = c
				}
				l.Quota, l.GPUs = c.quota, c.gpus
				if c.action != "" && action != ActionOff {
					l.Action = c.action // the policy's, where it chose one
				}
			}
			if l.Quota == 0 && l.GPUs == nil {
				continue
			}
			for _, cg := range t.Cgroups {
				l.Cgroups = append(l.Cgroups, cgroup.ID(cg.CgroupID))
			}
			out = append(out, l)
		}
		for id := range cache {
			if !live[id] {
				delete(cache, id)
			}
		}
		return out, nil
	}
}
