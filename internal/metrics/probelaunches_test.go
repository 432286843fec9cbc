package metrics

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/probefiles/launches"
	"github.com/gpuext/gpuext/internal/admission"
)

// The interposer's launch table as series: launches by how they can be
// measured and why, blocks, and the host-measured latency, each labelled
// measured; a tenant's invented reasons cannot grow the series without bound.
func TestProbeLaunchSeries(t *testing.T) {
	state := t.TempDir()
	probeTenant(t, state, 9, 1)
	f := &launches.File{PID: 300, Final: true, Latency: true, LatSkipped: 3,
		Coverage: []launches.Coverage{
			{Measured: launches.Device, Reason: "ok", Kernels: 1, Launches: 10, Blocks: 40},
			{Measured: launches.Host, Reason: "sass-only", Kernels: 5, Launches: 50, Blocks: 500},
			{Measured: launches.None, Reason: "graph-not-instantiated-seen", Launches: 2},
		}}
	f.LatHist[14] = 50 // [16384, 32768) ns
	many := &launches.File{PID: 301}
	for i := 0; i < launches.MaxCoverage; i++ {
		many.Coverage = append(many.Coverage, launches.Coverage{Measured: launches.Host, Reason: fmt.Sprintf("made-up-%d", i), Kernels: 1, Launches: 1})
	}
	acct := filepath.Join(admission.AcctDir(state, 9), admission.AcctProbesDir)
	for name, lf := range map[string]*launches.File{"300.launches": f, "301.launches": many} {
		if err := os.WriteFile(filepath.Join(acct, name), launches.Encode(lf), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	reg := &fakeRegistry{tenants: []bpf.Tenant{tenant(9, "ns", "pod", "latency-critical", 0, "app")}}
	fams := scrape(t, reg, state, noCore{})
	for _, c := range []struct {
		name  string
		extra []string
		want  float64
	}{
		{"gpuext_tenant_probe_launches_total", []string{"measured=device", "reason=ok"}, 10},
		{"gpuext_tenant_probe_launches_total", []string{"measured=host", "reason=sass-only"}, 50},
		{"gpuext_tenant_probe_launches_total", []string{"measured=none", "reason=graph-not-instantiated-seen"}, 2},
		{"gpuext_tenant_probe_launch_blocks_total", []string{"measured=host"}, 500},
		{"gpuext_tenant_probe_host_latency_seconds", []string{"measured=host"}, 50},
		{"gpuext_tenant_probe_host_latency_skipped_total", nil, 3},
		{"gpuext_tenant_probe_events_total", []string{"probe=launch-stats", "counter=launches"}, 10}, // the device's own count
	} {
		if v, ok := value(fams, c.name, 9, c.extra...); !ok || v != c.want {
			t.Errorf("%s%v: %v %v, want %v\n%v", c.name, c.extra, v, ok, c.want, series(fams, c.name))
		}
	}
	if n := len(fams["gpuext_tenant_probe_launches_total"].GetMetric()); n > maxCoverageSeries {
		t.Errorf("%d launch series for one tenant, at most %d", n, maxCoverageSeries)
	}
	if v, ok := value(fams, "gpuext_tenant_probe_launches_total", 9, "measured=host", "reason=(other-reasons)"); !ok || v == 0 {
		t.Errorf("no (other-reasons) series: %v", series(fams, "gpuext_tenant_probe_launches_total"))
	}
}

// A tenant that writes new reasons before every scrape made 32 new series
// each time (581 in 20 scrapes): the reasons it shows are bounded over its
// life, not per scrape; a new tenant of the same id gets a budget of its own.
func TestProbeLaunchReasonsBoundedOverTime(t *testing.T) {
	state := t.TempDir()
	probeTenant(t, state, 9, 1)
	acct := filepath.Join(admission.AcctDir(state, 9), admission.AcctProbesDir)
	ten := tenant(9, "ns", "pod", "latency-critical", 0, "app")
	ten.Created = time.Unix(100, 0)
	reg := &fakeRegistry{tenants: []bpf.Tenant{ten}}
	r := prometheus.NewRegistry()
	r.MustRegister(NewTenantCollector(reg, state, nil))
	reasons := map[string]bool{}
	gather := func(round int) {
		t.Helper()
		f := &launches.File{PID: 300}
		for i := 0; i < launches.MaxCoverage; i++ {
			f.Coverage = append(f.Coverage, launches.Coverage{Measured: launches.Host,
				Reason: fmt.Sprintf("round-%d-reason-%d", round, i), Kernels: 1, Launches: 1})
		}
		if err := os.WriteFile(filepath.Join(acct, "300.launches"), launches.Encode(f), 0o666); err != nil {
			t.Fatal(err)
		}
		fams, err := r.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, fam := range fams {
			if fam.GetName() != "gpuext_tenant_probe_launches_total" {
				continue
			}
			for _, m := range fam.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "reason" {
						reasons[l.GetValue()] = true
					}
				}
			}
		}
	}
	for round := range 20 {
		gather(round)
	}
	if len(reasons) > maxCoverageSeries {
		t.Fatalf("one tenant made %d reason series in 20 scrapes, at most %d over its life", len(reasons), maxCoverageSeries)
	}
	if !reasons["(other-reasons)"] {
		t.Fatalf("no (other-reasons) series")
	}
	// the id reused by a new tenant: its own reasons are shown
	reg.tenants[0].Created = time.Unix(200, 0)
	clear(reasons)
	gather(99)
	if !reasons["round-99-reason-0"] {
		t.Fatalf("a new tenant of the same id shows none of its reasons: %v", reasons)
	}
}
