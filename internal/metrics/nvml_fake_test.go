package metrics

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup/cgrouptest"
	"github.com/gpuext/gpuext/lib/testutil"
)

// TestNVMLOverFakeDriver runs the real chain where no GPU is: the agent's
// collector runs gpuext-gpuview (built with cgo, as make build does) over
// the repo's fake libnvidia-ml.so.1 (devrt/build.sh), which reports a
// process of a tenant's cgroup on GPU 1; the scrape shows what the fake
// reports for it under the tenant's labels.
func TestNVMLOverFakeDriver(t *testing.T) {
	dir, id := cgrouptest.New(t)
	cmd := cgrouptest.RunIn(t, dir, "sleep", "30")
	bin, fake := testutil.BuildGpuviewOverFake(t)
	work := t.TempDir()
	cfg := filepath.Join(work, "config.json") // no registry there: gpuext-gpuview lists processes only
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `{"pinDir": %q}`, filepath.Join(work, "no-registry")), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GPUEXT_CONFIG", cfg)
	t.Setenv("LD_LIBRARY_PATH", fake)
	t.Setenv("FAKECUDA_DEVICES", "2")
	t.Setenv("FAKENVML_PROCESSES", fmt.Sprintf("1:%d:3221225472,1:%d:1048576", cmd.Process.Pid, os.Getpid()))

	web := tenant(5, "ml", "train-0", "quota", 8<<30, "trainer")
	web.Cgroups[0].CgroupID = id
	fams := scrapeNVML(t, nvmlCollector(&fakeRegistry{tenants: []bpf.Tenant{web}}, bin, 10*time.Second))
	if got := series(fams, "gpuext_nvml_up"); !slices.Equal(got, []string{": 1"}) {
		t.Fatalf("gpuext_nvml_up = %v, want 1", got)
	}
	got := series(fams, "gpuext_tenant_nvml_memory_used_bytes")
	want := []string{"container=trainer,gpu=1,namespace=ml,pod=train-0,policy=quota,tenant=5: 3.221225472e+09"}
	if !slices.Equal(got, want) {
		t.Errorf("gpuext_tenant_nvml_memory_used_bytes = %v, want %v (3 GiB, as the fake NVML reports)", got, want)
	}
	if got := series(fams, "gpuext_nvml_untracked_memory_used_bytes"); !slices.Equal(got, []string{"gpu=1: 1.048576e+06"}) {
		t.Errorf("untracked = %v, want the test process's 1 MiB on gpu 1", got)
	}

	// the same binary on a host without the driver: up 0, no series
	t.Setenv("LD_LIBRARY_PATH", t.TempDir())
	fams = scrapeNVML(t, nvmlCollector(&fakeRegistry{tenants: []bpf.Tenant{web}}, bin, 10*time.Second))
	if got := series(fams, "gpuext_nvml_up"); !slices.Equal(got, []string{": 0"}) {
		t.Errorf("without libnvidia-ml: gpuext_nvml_up = %v, want 0", got)
	}
	if got := series(fams, "gpuext_tenant_nvml_memory_used_bytes"); got != nil {
		t.Errorf("without libnvidia-ml: per-tenant series %v", got)
	}
}
