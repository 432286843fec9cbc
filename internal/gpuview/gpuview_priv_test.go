package gpuview

import (
	"os"
	"testing"

	"github.com/gpuext/gpuext/bpf/bpftest"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/cgroup/cgrouptest"
)

// TestMapToTenants: a process inside a registered container cgroup maps to
// that tenant and container; a process elsewhere maps to no tenant.
func TestMapToTenants(t *testing.T) {
	reg, _ := bpftest.Registry(t)
	res, err := cgroup.NewResolver("/")
	if err != nil {
		t.Fatal(err)
	}
	dir, id := cgrouptest.New(t)
	cmd := cgrouptest.RunIn(t, dir, "sleep", "30")
	tid, err := reg.Upsert("oci/ctr/web", "quota", bpf.GpuextTenantConfig{}, bpf.CgroupEntry{CgroupID: id,
		CgroupPath: "/x", ContainerID: "web", ContainerName: "web", Runtime: bpf.RuntimeOCIHook})
	if err != nil {
		t.Fatal(err)
	}
	rows := Map([]Process{{GPU: 0, PID: uint32(cmd.Process.Pid), UsedBytes: 3 << 30},
		{GPU: 0, PID: uint32(os.Getpid()), UsedBytes: 1 << 30}}, res, reg)
	byPID := map[uint32]Row{}
	for _, r := range rows {
		byPID[r.PID] = r
	}
	in := byPID[uint32(cmd.Process.Pid)]
	if in.Tenant != tid || in.Container != "web" || in.Policy != "quota" || in.CgroupID != id {
		t.Errorf("process in the container cgroup: %+v, want tenant %d container web", in, tid)
	}
	if out := byPID[uint32(os.Getpid())]; out.Tenant != 0 || out.Err != "" {
		t.Errorf("process outside any tenant: %+v", out)
	}
	if got := TenantTotals(rows); got[tid] != 3<<30 || got[0] != 1<<30 {
		t.Errorf("totals %v", got)
	}
}
