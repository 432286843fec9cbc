package kernelpolicy

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// The scheduling policies attach as gpuext_sched_ops; each claims priority
// classes (two attached sched policies never share one) and a tenant's
// priority_class selects the policy for its TSGs:
//
//	sched_priority  latency-critical and best-effort: timeslice and interleave by class
//	sched_admit     standard: bind refuses a TSG of a tenant over its context limit

// admitLimitsMap is sched_admit's map of context limits (tenant id -> limit, 0 = default).
const admitLimitsMap = "admit_limits"

// SetContextLimit sets the number of bound TSGs that sched_admit allows a
// tenant (tenant 0: the default for tenants without their own limit).
func (a *Attached) SetContextLimit(tenant uint32, limit uint32) error {
	m, ok := a.Map(admitLimitsMap)
	if !ok {
		return fmt.Errorf("set context limit: policy %q has no %s map", a.Name, admitLimitsMap)
	}
	if err := m.Update(tenant, limit, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("set context limit of tenant %d: %w", tenant, err)
	}
	return nil
}
