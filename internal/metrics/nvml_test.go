package metrics

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup/cgrouptest"
	"github.com/gpuext/gpuext/internal/gpuview"
)

// fakeGpuview writes an executable shell script standing in for
// gpuext-gpuview (cmd/gpuext-gpuview's own tests cover NVML) and returns
// its path.
func fakeGpuview(t *testing.T, script string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gpuext-gpuview")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// scrapeNVML gathers c alone.
func scrapeNVML(t *testing.T, c *TenantCollector) map[string]*dto.MetricFamily {
	t.Helper()
	r := prometheus.NewRegistry()
	r.MustRegister(c)
	fams, err := r.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// nvmlCollector is a tenant collector over reg whose NVML view runs bin
// ("": none found) for at most timeout.
func nvmlCollector(reg Registry, bin string, timeout time.Duration) *TenantCollector {
	c := NewTenantCollector(reg, "/nonexistent", nil)
	c.SetNVML(NVMLOptions{HostRoot: "/", Gpuview: func() (string, error) {
		if bin == "" {
			return "", fmt.Errorf("no gpuext-gpuview beside the agent or on PATH: %w", os.ErrNotExist)
		}
		return bin, nil
	}})
	c.nvml.timeout = timeout
	return c
}

// TestNVMLPerTenant: the NVML memory gpuext-gpuview reports for a process
// in a tenant's cgroup shows under that tenant's labels per GPU, summed
// over its processes; a host process (root cgroup) shows as untracked.
func TestNVMLPerTenant(t *testing.T) {
	dir, id := cgrouptest.New(t)
	cmd := cgrouptest.RunIn(t, dir, "sleep", "30")
	pid := cmd.Process.Pid
	web := tenant(7, "shop", "web-0", "quota", 4<<30, "web")
	web.Cgroups[0].CgroupID = id
	idle := tenant(8, "shop", "idle-0", "quota", 1<<30, "idle")
	reg := &fakeRegistry{tenants: []bpf.Tenant{web, idle}}
	bin := fakeGpuview(t, fmt.Sprintf(`[ "$1" = --json ] || exit 2
cat <<EOF
[{"gpu":0,"uuid":"GPU-a","pid":%[1]d,"usedBytes":1073741824,"tenant":0},
 {"gpu":0,"uuid":"GPU-a","pid":%[1]d,"usedBytes":536870912,"tenant":0},
 {"gpu":1,"uuid":"GPU-b","pid":%[1]d,"usedBytes":2147483648,"tenant":0},
 {"gpu":1,"uuid":"GPU-b","pid":%[2]d,"usedBytes":268435456,"tenant":0}]
EOF`, pid, os.Getpid()))
	c := nvmlCollector(reg, bin, 5*time.Second)
	fams := scrapeNVML(t, c)
	if got := series(fams, "gpuext_nvml_up"); !slices.Equal(got, []string{": 1"}) {
		_, err := c.nvml.get()
		t.Fatalf("gpuext_nvml_up = %v, want 1: %v", got, err)
	}
	got := series(fams, "gpuext_tenant_nvml_memory_used_bytes")
	want := []string{ // 1 GiB + 512 MiB on gpu 0, 2 GiB on gpu 1
		"container=web,gpu=0,namespace=shop,pod=web-0,policy=quota,tenant=7: 1.610612736e+09",
		"container=web,gpu=1,namespace=shop,pod=web-0,policy=quota,tenant=7: 2.147483648e+09",
	}
	if !slices.Equal(got, want) {
		t.Errorf("gpuext_tenant_nvml_memory_used_bytes = %v, want %v", got, want)
	}
	if _, ok := value(fams, "gpuext_tenant_nvml_memory_used_bytes", 8); ok {
		t.Errorf("a tenant with no GPU process has an NVML series: %v", got)
	}
	if got := series(fams, "gpuext_nvml_untracked_memory_used_bytes"); !slices.Equal(got, []string{"gpu=1: 2.68435456e+08"}) {
		t.Errorf("untracked = %v, want the test's own process on gpu 1", got)
	}
}

// TestNVMLDown: whatever goes wrong with gpuext-gpuview, the scrape
// succeeds with gpuext_nvml_up 0 and no NVML series, within the timeout.
func TestNVMLDown(t *testing.T) {
	reg := &fakeRegistry{tenants: []bpf.Tenant{tenant(1, "ns", "p", "quota", 0, "c")}}
	cases := map[string]string{
		"missing":     "",
		"no driver":   `echo "gpuext-gpuview: no NVIDIA driver (libnvidia-ml) on this host" >&2; exit 1`,
		"garbage":     `echo 'not json'`,
		"not a list":  `echo '{"gpu":0}'`,
		"null":        `echo null`,
		"extra field": `echo '[{"gpu":0,"uuid":"","pid":1,"usedBytes":1,"tenant":0,"sneaky":1}]'`,
		"bad gpu":     `echo '[{"gpu":64,"uuid":"","pid":1,"usedBytes":1,"tenant":0}]'`,
		"pid 0":       `echo '[{"gpu":0,"uuid":"","pid":0,"usedBytes":1,"tenant":0}]'`,
		"trailing":    `echo '[] []'`,
		"too much":    `printf '[' ; head -c 2000000 /dev/zero | tr '\0' ' '; printf ']'`,
		"hangs":       `exec sleep 60`,
		"child holds": `sleep 60; echo '[]'`, // the shell is killed, its child keeps stdout open
	}
	for name, script := range cases {
		t.Run(name, func(t *testing.T) {
			bin := ""
			if script != "" {
				bin = fakeGpuview(t, script)
			}
			c := nvmlCollector(reg, bin, 300*time.Millisecond)
			start := time.Now()
			fams := scrapeNVML(t, c)
			// a bound, not a timing target: 300 ms timeout, 1 s WaitDelay
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("scrape took %s, gpuext-gpuview's timeout is 300ms", d)
			}
			if got := series(fams, "gpuext_nvml_up"); !slices.Equal(got, []string{": 0"}) {
				t.Errorf("gpuext_nvml_up = %v, want 0", got)
			}
			for _, n := range []string{"gpuext_tenant_nvml_memory_used_bytes", "gpuext_nvml_untracked_memory_used_bytes"} {
				if got := series(fams, n); got != nil {
					t.Errorf("%s = %v, want none", n, got)
				}
			}
			if got := series(fams, "gpuext_tenant_quota_bytes"); len(got) != 1 {
				t.Errorf("the other tenant series went with NVML: quota = %v", got)
			}
			if _, err := c.nvml.get(); err == nil || !strings.Contains(err.Error(), "gpuext-gpuview") {
				t.Errorf("reason = %v, want one naming gpuext-gpuview", err)
			}
		})
	}
}

// TestNVMLCached: a burst of scrapes runs gpuext-gpuview once.
func TestNVMLCached(t *testing.T) {
	runs := filepath.Join(t.TempDir(), "runs")
	bin := fakeGpuview(t, fmt.Sprintf(`echo run >> %q; echo '[]'`, runs))
	c := nvmlCollector(&fakeRegistry{}, bin, 5*time.Second)
	for range 3 {
		if got := series(scrapeNVML(t, c), "gpuext_nvml_up"); !slices.Equal(got, []string{": 1"}) {
			t.Fatalf("gpuext_nvml_up = %v, want 1", got)
		}
	}
	data, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "run"); n != 1 {
		t.Errorf("gpuext-gpuview ran %d times for 3 scrapes within %s, want 1", n, NVMLCacheFor)
	}
	c.nvml.cacheFor = 0
	scrapeNVML(t, c)
	if data, _ = os.ReadFile(runs); strings.Count(string(data), "run") != 2 {
		t.Errorf("gpuext-gpuview did not run again once the cache expired: %q", data)
	}
}

// TestNVMLDecodesGpuview: what gpuext-gpuview --json prints for a row with
// every field set decodes (the agent's row type follows gpuview.Row).
func TestNVMLDecodesGpuview(t *testing.T) {
	row := gpuview.Row{Process: gpuview.Process{GPU: 3, UUID: "GPU-x", PID: 42, UsedBytes: 5 << 20},
		CgroupPath: "/kubepods/x", CgroupID: 99, Tenant: 7, Container: "abc", ContainerName: "web", Policy: "quota", Err: "e"}
	data, err := json.MarshalIndent([]gpuview.Row{row}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := decodeNVML(data)
	if err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	if len(rows) != 1 || rows[0].GPU != 3 || rows[0].PID != 42 || rows[0].UsedBytes != 5<<20 || rows[0].Tenant != 7 {
		t.Errorf("rows = %+v", rows)
	}
}
