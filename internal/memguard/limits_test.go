package memguard

import (
	"os"
	"testing"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/internal/admission"
)

type listed []bpf.Tenant

func (l listed) List() ([]bpf.Tenant, error) { return l, nil }

// TestRegistryLimitsFromTenantFiles: the quota and the per-GPU quotas come
// from the tenant file admission wrote, the action from the policy's
// memory.quotaAction where it chose one (else the node's); a tenant without
// a quota is not held; a changed file is read again.
func TestRegistryLimitsFromTenantFiles(t *testing.T) {
	state := t.TempDir()
	write := func(id uint32, tf tenantcfg.File) {
		dir := admission.TenantDir(state, uint64(id))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		tf.TenantID = id
		if err := tenantcfg.WriteFiles(dir, tf); err != nil {
			t.Fatal(err)
		}
	}
	write(1, tenantcfg.File{Policy: "quota", QuotaBytes: 4 << 30})
	write(2, tenantcfg.File{Policy: "batch", QuotaBytes: 8 << 30, GPUs: []int{3, 1}, GPUQuotaBytes: []uint64{2 << 30, 6 << 30}, QuotaAction: "report"})
	write(3, tenantcfg.File{Policy: "default"})
	reg := listed{
		{ID: 1, Key: "a", Cgroups: []bpf.CgroupEntry{{CgroupID: 10}}},
		{ID: 2, Key: "b", Cgroups: []bpf.CgroupEntry{{CgroupID: 20}, {CgroupID: 21}}},
		{ID: 3, Key: "c", Cgroups: []bpf.CgroupEntry{{CgroupID: 30}}},
	}
	limits := RegistryLimits(reg, state, ActionKill)
	ls, err := limits()
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 2 {
		t.Fatalf("limits %+v: want tenants 1 and 2 (3 has no quota)", ls)
	}
	if l := ls[0]; l.Tenant != 1 || l.Quota != 4<<30 || l.GPUs != nil || l.Action != ActionKill || len(l.Cgroups) != 1 {
		t.Errorf("tenant 1: %+v", l)
	}
	if l := ls[1]; l.Tenant != 2 || l.GPUs[3] != 2<<30 || l.GPUs[1] != 6<<30 || l.Action != ActionReport || len(l.Cgroups) != 2 {
		t.Errorf("tenant 2: %+v (want per-GPU quotas and the policy's report)", l)
	}
	// set-policy rewrote tenant 1's file: the next refresh reads it
	write(1, tenantcfg.File{Policy: "quota", QuotaBytes: 2 << 30, QuotaAction: "report"})
	if ls, _ = limits(); ls[0].Quota != 2<<30 || ls[0].Action != ActionReport {
		t.Errorf("tenant 1 after its file changed: %+v", ls[0])
	}
	// the node's off wins over a policy's choice
	if ls, _ = RegistryLimits(reg, state, ActionOff)(); ls[1].Action != ActionOff {
		t.Errorf("memoryGuard.action off: tenant 2's action %q", ls[1].Action)
	}
}
