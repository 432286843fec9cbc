package admission_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/bpf/bpftest"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/lib/testutil"
	"github.com/gpuext/gpuext/policies"
)

// TestDmemFollowsTheTenant: on a node whose kernel has the dmem controller
// (a host root shaped like cgroupfs: this machine's kernel has none), the
// quota of an admitted container lands in dmem.max of its cgroup when it is
// registered, with dmem enabled along its path; a policy change rewrites it,
// and reconcile writes it back after someone reset it; a GPU whose driver
// registered no region is said once in the log and nothing fails.
func TestDmemFollowsTheTenant(t *testing.T) {
	const gpu0 = "nvidia/0000:17:00.0/vidmem"
	host := t.TempDir()
	v2 := filepath.Join(host, "sys/fs/cgroup")
	for p, data := range map[string]string{
		"cgroup.controllers":          "memory dmem\n",
		"dmem.capacity":               gpu0 + " 85899345920\n",
		"cgroup.subtree_control":      "memory\n",
		"pods/cgroup.subtree_control": "",
		"pods/c1/dmem.max":            gpu0 + " max\n",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(v2, p)), 0o755)
		if err := os.WriteFile(filepath.Join(v2, p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, err := cgroup.NewResolver(host)
	if err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	testutil.UnmountUnder(t, stateDir)
	reg, _ := bpftest.Registry(t)
	var log strings.Builder
	lg := logrus.New()
	lg.SetOutput(&log)
	core, err := admission.New(admission.Config{FailMode: admission.FailClosed, StateDir: stateDir, DevrtDir: t.TempDir()},
		reg, policies.BuiltinCatalog(), nil, res, logrus.NewEntry(lg))
	if err != nil {
		t.Fatal(err)
	}
	// GPU 1 has no region (a driver before r615 beside one that has it).
	core.SetNodeGPUs([]admission.NodeGPU{{Index: 0, PCIBusID: "00000000:17:00.0"}, {Index: 1, PCIBusID: "00000000:18:00.0"}})
	// Said at once, before any tenant: which GPUs the kernel holds, which it cannot.
	if !strings.Contains(log.String(), "holds the GPU memory quotas") || !strings.Contains(log.String(), "registered no region") {
		t.Fatalf("discovery's GPUs are not said in the log:\n%s", log.String())
	}

	info := admission.ContainerInfo{ID: "c1", Name: "c1", Runtime: bpf.RuntimeRuncWrapper, CgroupsPath: "/pods/c1",
		Annotations: map[string]string{"policy.gpuext.io": "quota", "quota.gpuext.io": "2GiB"}}
	d, err := core.Admit(info)
	if err != nil || d.RequestErr != nil {
		t.Fatalf("admit: %v %v", err, d.RequestErr)
	}
	if _, _, err := core.Register(info, d); err != nil {
		t.Fatal(err)
	}
	dmemMax := func() string {
		b, err := os.ReadFile(filepath.Join(v2, "pods/c1/dmem.max"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := dmemMax(); !strings.HasPrefix(got, gpu0+" 2147483648") {
		t.Fatalf("dmem.max after register = %q, want the 2 GiB quota", got)
	}
	for _, p := range []string{"cgroup.subtree_control", "pods/cgroup.subtree_control"} {
		if b, _ := os.ReadFile(filepath.Join(v2, p)); !strings.HasPrefix(string(b), "+dmem") {
			t.Errorf("%s = %q, want +dmem written", p, b)
		}
	}
	if !strings.Contains(log.String(), "enabled the dmem controller") {
		t.Errorf("the log does not say dmem was enabled:\n%s", log.String())
	}

	if _, err := core.SetPolicy(admission.PolicyChange{Tenant: d.TenantKey, Policy: "quota",
		Params: map[string]string{"quota": "1GiB"}}); err != nil {
		t.Fatal(err)
	}
	if got := dmemMax(); !strings.HasPrefix(got, gpu0+" 1073741824") {
		t.Fatalf("dmem.max after set-policy = %q, want the 1 GiB quota", got)
	}
	// Someone resets it: the next reconcile writes the quota back.
	if err := os.WriteFile(filepath.Join(v2, "pods/c1/dmem.max"), []byte(gpu0+" max             \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := core.Reconcile(time.Minute, bpf.RuntimeRuncWrapper); err != nil {
		t.Fatal(err)
	}
	if got := dmemMax(); !strings.HasPrefix(got, gpu0+" 1073741824") {
		t.Fatalf("dmem.max after reconcile = %q, want the 1 GiB quota back", got)
	}
	if n := strings.Count(log.String(), "registered no region"); n != 1 {
		t.Errorf("the missing region of GPU 1 was said %d times, want once:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), "nvidia/0000:18:00.0/vidmem") {
		t.Errorf("the notice does not name the region it looked for:\n%s", log.String())
	}
}
