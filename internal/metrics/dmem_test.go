package metrics

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup"
)

// dmemHostTree writes a fixture host root shaped like cgroupfs: files maps
// paths below /sys/fs/cgroup to contents.
func dmemHostTree(t *testing.T, files map[string]string) string {
	t.Helper()
	host := t.TempDir()
	for p, data := range files {
		full := filepath.Join(host, "sys/fs/cgroup", p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return host
}

func gaugeOf(t *testing.T, r *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	f := gather(t, r)[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

// TestDmemCollector: a node whose kernel holds quotas shows it, its regions,
// and each tenant's dmem.current (summed over a pod tenant's cgroups) and
// dmem.max per region; an unlimited region has no max series.
func TestDmemCollector(t *testing.T) {
	const gpu0, gpu1 = "nvidia/0000:17:00.0/vidmem", "nvidia/0000:18:00.0/vidmem"
	host := dmemHostTree(t, map[string]string{
		"cgroup.controllers": "memory dmem\n",
		"dmem.capacity":      gpu0 + " 85899345920\n" + gpu1 + " 85899345920\n",
		"pod/a/dmem.current": gpu0 + " 1000\n" + gpu1 + " 0\n",
		"pod/a/dmem.max":     gpu0 + " 4294967296\n" + gpu1 + " max\n",
		"pod/b/dmem.current": gpu0 + " 24\n" + gpu1 + " 0\n",
		"pod/b/dmem.max":     gpu0 + " 4294967296\n" + gpu1 + " max\n",
	})
	tn := tenant(7, "ns", "p", "quota", 4<<30, "a", "b")
	for i, name := range []string{"a", "b"} {
		st, err := os.Stat(filepath.Join(host, "sys/fs/cgroup/pod", name))
		if err != nil {
			t.Fatal(err)
		}
		tn.Cgroups[i].CgroupID = cgroup.ID(st.Sys().(*syscall.Stat_t).Ino)
		tn.Cgroups[i].CgroupPath = "/pod/" + name
	}
	stale := tenant(8, "ns", "q", "quota", 1<<30, "gone") // its path names no cgroup: not read
	r := prometheus.NewRegistry()
	r.MustRegister(NewDmemCollector(&fakeRegistry{tenants: []bpf.Tenant{tn, stale}}, host))

	for name, want := range map[string]float64{"gpuext_dmem_controller": 1, "gpuext_dmem_enforcing": 1} {
		if v, ok := gaugeOf(t, r, name, nil); !ok || v != want {
			t.Errorf("%s = %v (%v), want %v", name, v, ok, want)
		}
	}
	if v, ok := gaugeOf(t, r, "gpuext_dmem_region_capacity_bytes", map[string]string{"region": gpu1}); !ok || v != 80<<30 {
		t.Errorf("region capacity = %v, %v", v, ok)
	}
	if v, ok := gaugeOf(t, r, "gpuext_tenant_dmem_current_bytes", map[string]string{"tenant": "7", "region": gpu0}); !ok || v != 1024 {
		t.Errorf("tenant 7 dmem.current on GPU 0 = %v (%v), want 1024 (both cgroups)", v, ok)
	}
	if v, ok := gaugeOf(t, r, "gpuext_tenant_dmem_max_bytes", map[string]string{"tenant": "7", "region": gpu0}); !ok || v != 4<<30 {
		t.Errorf("tenant 7 dmem.max on GPU 0 = %v (%v)", v, ok)
	}
	if _, ok := gaugeOf(t, r, "gpuext_tenant_dmem_max_bytes", map[string]string{"tenant": "7", "region": gpu1}); ok {
		t.Error("an unlimited region has a dmem.max series")
	}
	if _, ok := gaugeOf(t, r, "gpuext_tenant_dmem_current_bytes", map[string]string{"tenant": "8"}); ok {
		t.Error("a tenant whose cgroup is gone has a dmem series")
	}
}

// TestDmemCollectorNotEnforcing: the controller without a region (NVIDIA
// before r615) and no controller at all both show enforcing 0, no tenant series.
func TestDmemCollectorNotEnforcing(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"no region":     {"cgroup.controllers": "memory dmem\n", "dmem.capacity": ""},
		"no controller": {"cgroup.controllers": "memory\n"},
	} {
		r := prometheus.NewRegistry()
		r.MustRegister(NewDmemCollector(&fakeRegistry{tenants: []bpf.Tenant{tenant(1, "ns", "p", "quota", 1, "a")}}, dmemHostTree(t, files)))
		ctrl, _ := gaugeOf(t, r, "gpuext_dmem_controller", nil)
		if v, ok := gaugeOf(t, r, "gpuext_dmem_enforcing", nil); !ok || v != 0 || ctrl != map[string]float64{"no region": 1, "no controller": 0}[name] {
			t.Errorf("%s: enforcing %v (%v), controller %v", name, v, ok, ctrl)
		}
		if _, ok := gather(t, r)["gpuext_tenant_dmem_current_bytes"]; ok {
			t.Errorf("%s: tenant dmem series", name)
		}
	}
}
