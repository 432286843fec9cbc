package metrics

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/bpf/kernelpolicy"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/devrt/board"
	"github.com/gpuext/gpuext/devrt/probefiles/maps"
	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/compile"
	"github.com/gpuext/gpuext/gpubpf/devmap"
	"github.com/gpuext/gpuext/internal/admission"
)

// fakeRegistry is a tenant registry without BPF: the collector's tests
// are about the files tenants write, not the maps.
type fakeRegistry struct {
	tenants []bpf.Tenant
	stats   map[bpf.TenantID]bpf.GpuextTenantStats
}

func (f *fakeRegistry) List() ([]bpf.Tenant, error) { return f.tenants, nil }

func (f *fakeRegistry) Stats(id bpf.TenantID) (bpf.GpuextTenantStats, error) { return f.stats[id], nil }

// noCore is a host without the gpuext core module.
type noCore struct{}

func (noCore) Check() error                            { return kernelpolicy.ErrNoCore }
func (noCore) Stats() ([]kernelpolicy.OpsStats, error) { return nil, kernelpolicy.ErrNoCore }

type loadedCore struct{ ops []kernelpolicy.OpsStats }

func (loadedCore) Check() error                              { return nil }
func (c loadedCore) Stats() ([]kernelpolicy.OpsStats, error) { return c.ops, nil }

func tenant(id bpf.TenantID, ns, pod, policy string, quota uint64, ctrs ...string) bpf.Tenant {
	t := bpf.Tenant{ID: id, Key: fmt.Sprintf("nri/ctr/%d", id), Policy: policy}
	t.Config.QuotaBytes = quota
	for i, c := range ctrs {
		t.Cgroups = append(t.Cgroups, bpf.CgroupEntry{CgroupID: cgroup.ID(1000*int(id) + i), ContainerID: fmt.Sprintf("%064d", 1000*int(id)+i),
			ContainerName: c, PodName: pod, PodNamespace: ns, Runtime: bpf.RuntimeNRI})
	}
	return t
}

// acctDir makes <state>/acct/<id> as admission does (the tenant's own dir).
func acctDir(t *testing.T, state string, id bpf.TenantID) string {
	t.Helper()
	dir := admission.AcctDir(state, uint64(id))
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

func writeUsage(t *testing.T, state string, u board.Usage) {
	t.Helper()
	path := filepath.Join(acctDir(t, state, bpf.TenantID(u.TenantID)), board.UsageFileName)
	if err := os.WriteFile(path, board.EncodeUsage(u), 0o666); err != nil {
		t.Fatal(err)
	}
}

// scrape gathers a registry holding the tenant and kernel collectors
// the way the agent builds them, failing on any gather error.
func scrape(t testing.TB, reg Registry, state string, core KernelCore) map[string]*dto.MetricFamily {
	t.Helper()
	r := prometheus.NewRegistry()
	k := NewKernelCollector(core)
	r.MustRegister(k, NewTenantCollector(reg, state, k))
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

// series lists name's series as "label=value,...: value", sorted.
func series(fams map[string]*dto.MetricFamily, name string) []string {
	var out []string
	f := fams[name]
	if f == nil {
		return nil
	}
	for _, m := range f.GetMetric() {
		var ls []string
		for _, l := range m.GetLabel() {
			ls = append(ls, l.GetName()+"="+l.GetValue())
		}
		var v float64
		switch {
		case m.Gauge != nil:
			v = m.GetGauge().GetValue()
		case m.Counter != nil:
			v = m.GetCounter().GetValue()
		case m.Histogram != nil:
			v = float64(m.GetHistogram().GetSampleCount())
		}
		out = append(out, fmt.Sprintf("%s: %g", strings.Join(ls, ","), v))
	}
	sort.Strings(out)
	return out
}

// value is the value of name's series for tenant id, and whether there is one.
func value(fams map[string]*dto.MetricFamily, name string, id bpf.TenantID, extra ...string) (float64, bool) {
	want := fmt.Sprintf("tenant=%d", id)
	for _, s := range series(fams, name) {
		lbl, v, _ := strings.Cut(s, ": ")
		if !strings.Contains(","+lbl+",", ","+want+",") {
			continue
		}
		ok := true
		for _, e := range extra {
			ok = ok && strings.Contains(","+lbl+",", ","+e+",")
		}
		if ok {
			var f float64
			fmt.Sscan(v, &f)
			return f, true
		}
	}
	return 0, false
}

func TestTenantSeries(t *testing.T) {
	state := t.TempDir()
	reg := &fakeRegistry{tenants: []bpf.Tenant{
		tenant(3, "prod", "web-0", "quota", 8<<30, "server"),
		tenant(4, "prod", "train-1", "batch", 0, "worker", "loader"),
		tenant(5, "", "", "default", 0), // reserved, not started: no container yet
	}}
	// The usage file says a quota of 1 byte: a tenant's own word is not the quota.
	writeUsage(t, state, board.Usage{TenantID: 3, QuotaBytes: 1, PeakBytes: 6 << 30, RefusedAllocs: 2, DelayedLaunches: 7, Launches: 1234})
	fams := scrape(t, reg, state, noCore{})
	got := strings.Join(series(fams, "gpuext_tenant_quota_bytes"), "\n")
	want := strings.Join([]string{
		"container=,namespace=,pod=,policy=default,tenant=5: 0",
		"container=loader,worker,namespace=prod,pod=train-1,policy=batch,tenant=4: 0",
		"container=server,namespace=prod,pod=web-0,policy=quota,tenant=3: 8.589934592e+09",
	}, "\n")
	if got != want {
		t.Errorf("quota series\n%s\nwant\n%s", got, want)
	}
	for name, want := range map[string]float64{"gpuext_tenant_device_memory_peak_bytes": 6 << 30,
		"gpuext_tenant_refused_allocations_total": 2, "gpuext_tenant_delayed_launches_total": 7,
		"gpuext_tenant_launches_total": 1234, "gpuext_tenant_device_memory_used_bytes": 0} {
		if v, ok := value(fams, name, 3); !ok || v != want {
			t.Errorf("%s of tenant 3: %v (present %v), want %v", name, v, ok, want)
		}
	}
	if v, ok := value(fams, "gpuext_tenant_usage_state", 4, "state=none"); !ok || v != 1 {
		t.Errorf("tenant 4 without a usage file: state %v", series(fams, "gpuext_tenant_usage_state"))
	}
	if _, ok := value(fams, "gpuext_tenant_refused_allocations_total", 4); ok {
		t.Errorf("tenant 4 without a usage file has a refused count")
	}
	if n := len(series(fams, "gpuext_tenant_container_info")); n != 3 {
		t.Errorf("container info: %d series, want 3 (one per cgroup): %v", n, series(fams, "gpuext_tenant_container_info"))
	}
	if v, _ := value(fams, "gpuext_kernel_core_loaded", 0); fams["gpuext_kernel_core_loaded"] == nil || v != 0 {
		t.Errorf("kernel core loaded: %v", series(fams, "gpuext_kernel_core_loaded"))
	}
	if fams["gpuext_kernel_tenant_faults_total"] != nil || fams["gpuext_kernel_policy_calls_total"] != nil {
		t.Errorf("kernel counters shown without the core")
	}

	// The tenant is removed: its series go with it at the next scrape.
	reg.tenants = reg.tenants[1:]
	fams = scrape(t, reg, state, noCore{})
	for _, name := range []string{"gpuext_tenant_quota_bytes", "gpuext_tenant_refused_allocations_total", "gpuext_tenant_usage_state"} {
		if _, ok := value(fams, name, 3); ok {
			t.Errorf("%s: removed tenant 3 still shown", name)
		}
	}
}

// secretUsage is a host file a hostile tenant would like the agent to show:
// a valid usage file with numbers that are not the tenant's.
func secretUsage(t *testing.T, id bpf.TenantID) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, board.EncodeUsage(board.Usage{TenantID: uint64(id), RefusedAllocs: 999, PeakBytes: 1 << 40}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestHostileUsageFiles: what a container can do to its own usage file
// (and acct dir) shows as a state, never as values read through a link,
// never blocks the scrape and never reads more than the layout's size.
func TestHostileUsageFiles(t *testing.T) {
	const id = 7
	for _, tc := range []struct {
		name, state string
		make        func(t *testing.T, state, acct string)
	}{
		{"symlinked usage", "refused", func(t *testing.T, _, acct string) {
			if err := os.Symlink(secretUsage(t, id), filepath.Join(acct, board.UsageFileName)); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlinked acct dir", "refused", func(t *testing.T, state, acct string) {
			other := filepath.Join(t.TempDir(), "other")
			os.MkdirAll(other, 0o777)
			os.WriteFile(filepath.Join(other, board.UsageFileName), board.EncodeUsage(board.Usage{TenantID: id, RefusedAllocs: 999}), 0o600)
			os.Remove(acct)
			if err := os.Symlink(other, acct); err != nil {
				t.Fatal(err)
			}
		}},
		{"huge file", "refused", func(t *testing.T, _, acct string) {
			f, err := os.Create(filepath.Join(acct, board.UsageFileName))
			if err != nil {
				t.Fatal(err)
			}
			f.Write(board.EncodeUsage(board.Usage{TenantID: id, RefusedAllocs: 999}))
			if err := f.Truncate(8 << 30); err != nil { // sparse: 8 GiB to a reader
				t.Fatal(err)
			}
			f.Close()
		}},
		{"truncated", "invalid", func(t *testing.T, _, acct string) {
			b := board.EncodeUsage(board.Usage{TenantID: id, RefusedAllocs: 999})
			os.WriteFile(filepath.Join(acct, board.UsageFileName), b[:len(b)/2], 0o666)
		}},
		{"empty", "invalid", func(t *testing.T, _, acct string) {
			os.WriteFile(filepath.Join(acct, board.UsageFileName), nil, 0o666)
		}},
		{"not initialised", "invalid", func(t *testing.T, _, acct string) {
			os.WriteFile(filepath.Join(acct, board.UsageFileName), make([]byte, board.UsageFileSize), 0o666)
		}},
		{"another tenant's", "invalid", func(t *testing.T, _, acct string) {
			os.WriteFile(filepath.Join(acct, board.UsageFileName), board.EncodeUsage(board.Usage{TenantID: id + 1, RefusedAllocs: 999}), 0o666)
		}},
		{"fifo", "refused", func(t *testing.T, _, acct string) {
			if err := syscall.Mkfifo(filepath.Join(acct, board.UsageFileName), 0o666); err != nil {
				t.Fatal(err)
			}
		}},
		{"directory", "refused", func(t *testing.T, _, acct string) {
			os.Mkdir(filepath.Join(acct, board.UsageFileName), 0o777)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			tc.make(t, state, acctDir(t, state, id))
			reg := &fakeRegistry{tenants: []bpf.Tenant{tenant(id, "ns", "pod", "quota", 4<<30, "app")}}
			done := make(chan map[string]*dto.MetricFamily, 1)
			go func() { done <- scrape(t, reg, state, noCore{}) }()
			var fams map[string]*dto.MetricFamily
			select {
			case fams = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("scrape blocked on the tenant's file")
			}
			if v, ok := value(fams, "gpuext_tenant_usage_state", id, "state="+tc.state); !ok || v != 1 {
				t.Errorf("usage state %v, want %s", series(fams, "gpuext_tenant_usage_state"), tc.state)
			}
			for _, name := range []string{"gpuext_tenant_refused_allocations_total", "gpuext_tenant_device_memory_peak_bytes"} {
				if v, ok := value(fams, name, id); ok {
					t.Errorf("%s shown from a hostile file: %v", name, v)
				}
			}
			if v, ok := value(fams, "gpuext_tenant_quota_bytes", id); !ok || v != 4<<30 {
				t.Errorf("quota %v %v: the registry's quota must stay shown", v, ok)
			}
		})
	}
}

// TestHostileLabels: names a runtime passed on from a pod or container
// spec become label values of valid UTF-8, without control characters,
// at most MaxLabelBytes, and the scrape still succeeds.
func TestHostileLabels(t *testing.T) {
	long := strings.Repeat("é", 300) // 600 bytes, cut at a rune boundary
	reg := &fakeRegistry{tenants: []bpf.Tenant{
		tenant(1, "ns\nfake_metric 1", "pod\xff\xfe", "quota\x00", 1, long),
		tenant(2, "ns", "pod", "p", 1, "a", "b", "c", "d", "e", "f", "g", "h", "i", "j"),
	}}
	fams := scrape(t, reg, t.TempDir(), noCore{})
	s := strings.Join(series(fams, "gpuext_tenant_quota_bytes"), "\n")
	for _, want := range []string{"namespace=nsfake_metric 1", "pod=pod\uFFFD", "policy=quota,", "container=a,b,c,d,e,f,g,h,+2,"} {
		if !strings.Contains(s, want) {
			t.Errorf("series\n%s\nlack %q", s, want)
		}
	}
	for _, m := range fams["gpuext_tenant_quota_bytes"].GetMetric() {
		for _, l := range m.GetLabel() {
			if len(l.GetValue()) > MaxLabelBytes {
				t.Errorf("label %s: %d bytes", l.GetName(), len(l.GetValue()))
			}
		}
	}
}

// TestTenantCap: a scrape shows at most MaxTenants tenants and says how
// many it left out.
func TestTenantCap(t *testing.T) {
	reg := &fakeRegistry{}
	for i := 1; i <= MaxTenants+76; i++ {
		reg.tenants = append(reg.tenants, tenant(bpf.TenantID(i), "ns", fmt.Sprintf("pod-%d", i), "default", 0, "c"))
	}
	fams := scrape(t, reg, t.TempDir(), noCore{})
	if n := len(fams["gpuext_tenant_quota_bytes"].GetMetric()); n != MaxTenants {
		t.Errorf("%d tenants shown, want %d", n, MaxTenants)
	}
	if got := series(fams, "gpuext_metrics_tenants_omitted"); len(got) != 1 || got[0] != ": 76" {
		t.Errorf("omitted: %v", got)
	}
}

func TestKernelCore(t *testing.T) {
	reg := &fakeRegistry{tenants: []bpf.Tenant{tenant(2, "ns", "pod", "tenant-quota", 1<<30, "app")},
		stats: map[bpf.TenantID]bpf.GpuextTenantStats{2: {Faults: 11, Evictions: 3, AllocBytes: 512 << 20, RefusedAllocs: 1}}}
	core := loadedCore{ops: []kernelpolicy.OpsStats{{Ops: "gpuext_lru", Kind: kernelpolicy.KindMemory, Calls: 40, Handled: 38, Errors: 1},
		{Ops: "sched_priority", Kind: kernelpolicy.KindSched, Calls: 5, Denied: 2}, {Ops: "gpuext_lru", Kind: kernelpolicy.KindMemory}}}
	fams := scrape(t, reg, t.TempDir(), core)
	for name, want := range map[string]float64{"gpuext_kernel_tenant_faults_total": 11, "gpuext_kernel_tenant_evictions_total": 3,
		"gpuext_kernel_tenant_device_memory_bytes": 512 << 20, "gpuext_kernel_tenant_refused_allocations_total": 1} {
		if v, ok := value(fams, name, 2); !ok || v != want {
			t.Errorf("%s: %v %v, want %v", name, v, ok, want)
		}
	}
	want := "kind=memory,ops=gpuext_lru: 40\nkind=sched,ops=sched_priority: 5"
	if got := strings.Join(series(fams, "gpuext_kernel_policy_calls_total"), "\n"); got != want {
		t.Errorf("policy calls\n%s\nwant\n%s", got, want)
	}
	if got := series(fams, "gpuext_kernel_policy_denied_total"); len(got) != 1 || got[0] != "kind=sched,ops=sched_priority: 2" {
		t.Errorf("denied: %v", got)
	}
	if got := series(fams, "gpuext_kernel_core_loaded"); len(got) != 1 || got[0] != ": 1" {
		t.Errorf("loaded: %v", got)
	}
}

// probeTenant writes what admission and the device runtime write for a
// tenant with the launch-stats and launch-latency probes: the manifest in
// the tenant dir, one .maps file per process in the acct dir.
func probeTenant(t testing.TB, state string, id bpf.TenantID, pids int) *abi.Manifest {
	t.Helper()
	b, err := compile.Compile([]string{"launch-stats", "launch-latency"}) // cached after the first
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(admission.TenantDir(state, uint64(id)), admission.TenantProbesDir)
	os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, abi.ManifestFile), b.ManifestJSON(), 0o644); err != nil {
		t.Fatal(err)
	}
	acct := filepath.Join(admission.AcctDir(state, uint64(id)), admission.AcctProbesDir)
	os.MkdirAll(acct, 0o777)
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	u64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	for pid := 1; pid <= pids; pid++ {
		f := &maps.File{PID: uint32(100 + pid), Image: 0, Seq: 1, Tenant: uint32(id), Final: true}
		for _, m := range b.Manifest.Maps {
			im := devmap.NewImage(m.Layout)
			vals := map[string][]uint64{
				"ls_counters": {10, 40, 4000, 40},                         // launches, blocks, blockNs, blockExits
				"lat_hist":    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 5, 2}, // 2^10..2^13 ns
			}[m.Name]
			for i, v := range vals {
				if v != 0 && im.Update(u32(uint32(i)), u64(v), devmap.FlagAny, 0) != 0 {
					t.Fatalf("%s[%d]", m.Name, i)
				}
			}
			f.Maps = append(f.Maps, maps.Map{Name: m.Name, Present: true, Layout: m.Layout, Bytes: im.Bytes})
		}
		if err := os.WriteFile(filepath.Join(acct, fmt.Sprintf("%d.0.maps", 100+pid)), maps.Encode(f), 0o666); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(acct, fmt.Sprintf("%d.status", 100+pid)), []byte("image=0 state=patched kernels=1\n"), 0o666)
	}
	return &b.Manifest
}

func TestProbeSeries(t *testing.T) {
	state := t.TempDir()
	probeTenant(t, state, 9, 2)
	reg := &fakeRegistry{tenants: []bpf.Tenant{tenant(9, "ns", "pod", "latency-critical", 0, "app")}}
	fams := scrape(t, reg, state, noCore{})
	for _, c := range []struct {
		name  string
		extra []string
		want  float64
	}{
		{"gpuext_tenant_probe_events_total", []string{"probe=launch-stats", "counter=launches"}, 20},
		{"gpuext_tenant_probe_events_total", []string{"probe=launch-stats", "counter=blocks"}, 80},
		{"gpuext_tenant_probe_time_seconds_total", []string{"probe=launch-stats", "counter=block"}, 8000e-9},
		{"gpuext_tenant_probe_latency_seconds", []string{"probe=launch-latency", "map=lat_hist"}, 20},
		{"gpuext_tenant_probe_processes", nil, 2},
		{"gpuext_tenant_probe_images", []string{"state=patched"}, 2},
		{"gpuext_tenant_probe_state", []string{"state=ok"}, 1},
	} {
		if v, ok := value(fams, c.name, 9, c.extra...); !ok || v != c.want {
			t.Errorf("%s%v: %v %v, want %v\n%v", c.name, c.extra, v, ok, c.want, series(fams, c.name))
		}
	}
	h := fams["gpuext_tenant_probe_latency_seconds"].GetMetric()[0].GetHistogram()
	var les []string
	for _, b := range h.GetBucket() {
		les = append(les, fmt.Sprintf("%.4g:%d", b.GetUpperBound(), b.GetCumulativeCount()))
	}
	// bucket 11 holds [1024, 2048) ns: le 2047 ns
	if got := strings.Join(les[10:], " "); got != "1.023e-06:0 2.047e-06:6 4.095e-06:16 8.191e-06:20" {
		t.Errorf("latency buckets %s", got)
	}
}

// TestHostileProbeFiles: a .maps file bigger than the tenant's module makes
// is skipped unread, a probes dir that is a link is refused, and the bytes
// a scrape reads are bounded.
func TestHostileProbeFiles(t *testing.T) {
	state := t.TempDir()
	m := probeTenant(t, state, 9, 1)
	acct := filepath.Join(admission.AcctDir(state, 9), admission.AcctProbesDir)
	big, _ := os.Create(filepath.Join(acct, "666.0.maps"))
	big.Truncate(maps.MaxFileSizeFor(m) + 1)
	big.Close()
	// tenant 10's probes dir is a link to tenant 9's
	probeTenant(t, state, 10, 1)
	acct10 := filepath.Join(admission.AcctDir(state, 10), admission.AcctProbesDir)
	os.RemoveAll(acct10)
	os.Symlink(acct, acct10)
	reg := &fakeRegistry{tenants: []bpf.Tenant{tenant(9, "ns", "a", "p", 0, "app"), tenant(10, "ns", "b", "p", 0, "app")}}
	fams := scrape(t, reg, state, noCore{})
	if v, _ := value(fams, "gpuext_tenant_probe_files_skipped", 9); v != 1 {
		t.Errorf("tenant 9 skipped %v files, want the big one", v)
	}
	if v, _ := value(fams, "gpuext_tenant_probe_events_total", 9, "counter=launches"); v != 10 {
		t.Errorf("tenant 9 launches %v: its good file must still count", v)
	}
	if v, ok := value(fams, "gpuext_tenant_probe_state", 10, "state=refused"); !ok || v != 1 {
		t.Errorf("tenant 10's linked probes dir: %v", series(fams, "gpuext_tenant_probe_state"))
	}
	if _, ok := value(fams, "gpuext_tenant_probe_events_total", 10, "counter=launches"); ok {
		t.Errorf("tenant 10 shows tenant 9's counts through its link")
	}
}

// TestProbeBudgetRotates: when a scrape's probe budget runs out, the
// tenants left unread are the first ones the next scrape reads.
func TestProbeBudgetRotates(t *testing.T) {
	state := t.TempDir()
	m := probeTenant(t, state, 1, 1)
	per := maps.MaxFileSizeFor(m)
	const n = 10
	reg := &fakeRegistry{}
	for i := 1; i <= n; i++ {
		if i > 1 {
			probeTenant(t, state, bpf.TenantID(i), 1)
		}
		reg.tenants = append(reg.tenants, tenant(bpf.TenantID(i), "ns", fmt.Sprintf("p%d", i), "p", 0, "c"))
	}
	r := prometheus.NewRegistry()
	k := NewKernelCollector(noCore{})
	c := NewTenantCollector(reg, state, k)
	c.probeBudget = 4 * (per + 64) // four tenants' files (a .maps and a .status each) a scrape
	r.MustRegister(k, c)
	unread := func() []bpf.TenantID {
		fams, err := r.Gather()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]*dto.MetricFamily{}
		for _, f := range fams {
			m[f.GetName()] = f
		}
		var out []bpf.TenantID
		for i := 1; i <= n; i++ {
			if _, ok := value(m, "gpuext_tenant_probe_state", bpf.TenantID(i), "state=over-budget"); ok {
				out = append(out, bpf.TenantID(i))
			}
		}
		return out
	}
	first := unread()
	if len(first) != n-4 {
		t.Fatalf("%d tenants unread (%v), want %d: the budget holds four tenants' files", len(first), first, n-4)
	}
	// Each scrape starts where the last one's budget ran out: three
	// scrapes of four read all ten.
	neverRead := map[bpf.TenantID]bool{}
	for _, id := range first {
		neverRead[id] = true
	}
	for range 2 {
		now := map[bpf.TenantID]bool{}
		for _, id := range unread() {
			now[id] = true
		}
		for id := range neverRead {
			if now[id] {
				continue
			}
			delete(neverRead, id)
		}
	}
	for id := range neverRead {
		t.Errorf("tenant %d's probes unread in three scrapes in a row", id)
	}
}
