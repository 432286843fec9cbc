package memguard

import (
	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup"
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
// the node's (memoryGuard.action). A tenant whose file cannot be read is
// held to the registry's quota on every GPU.
func RegistryLimits(reg Lister, stateDir string, action Action) func() ([]Limit, error) {
	return func() ([]Limit, error) {
		ts, err := reg.List()
		if err != nil {
			return nil, err
		}
		out := make([]Limit, 0, len(ts))
		for _, t := range ts {
			l := Limit{Tenant: t.ID, Key: t.Key, Policy: t.Policy, Quota: t.Config.QuotaBytes, Action: action}
			if tf, err := admission.ReadTenantFile(stateDir, uint64(t.ID)); err == nil {
				l.Quota = tf.QuotaBytes
				if len(tf.GPUs) > 0 && len(tf.GPUs) == len(tf.GPUQuotaBytes) {
					l.GPUs = make(map[int]uint64, len(tf.GPUs))
					for i, g := range tf.GPUs {
						l.GPUs[g] = tf.GPUQuotaBytes[i]
					}
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
		return out, nil
	}
}
