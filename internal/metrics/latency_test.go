package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/internal/latency"
)

// The latency controller's status becomes per-tenant series: the target in
// force, the measured and solo p99, the verdict (absent while not judged)
// and a best-effort tenant's stall; and the node's budget, share and
// pacing. With no controller there is no series.
func TestLatencySeries(t *testing.T) {
	r := prometheus.NewRegistry()
	a := NewAgent(r)
	if fams := gather(t, r); fams["gpuext_latency_p99_seconds"] != nil || fams["gpuext_latency_best_effort_paced"] != nil {
		t.Fatal("series without a controller")
	}
	st := latency.Status{Budget: 42, SMPercent: 21, Pace: 1, Targets: 2, Tenants: []latency.TenantStatus{
		{ID: 1, Class: tenantcfg.ClassLatencyCritical, Target: "1.5x", TargetP99: 300 * time.Microsecond, P99: 450 * time.Microsecond,
			SoloP99: 200 * time.Microsecond, Requests: 2500, Verdict: latency.Missed},
		{ID: 4, Class: tenantcfg.ClassLatencyCritical, Target: "1.5x", Verdict: latency.NoBaseline, Requests: 10},
		{ID: 2, Class: tenantcfg.ClassBestEffort, Stalled: true},
		{ID: 3, Class: tenantcfg.ClassBestEffort},
	}}
	a.SetLatency(func() (latency.Status, bool) { return st, true })
	fams := gather(t, r)
	value := func(name, tenant string) (float64, bool) {
		f := fams[name]
		if f == nil {
			return 0, false
		}
		for _, m := range f.GetMetric() {
			if tenant == "" && len(m.GetLabel()) == 0 {
				return m.GetGauge().GetValue(), true
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == "tenant" && l.GetValue() == tenant {
					return m.GetGauge().GetValue(), true
				}
			}
		}
		return 0, false
	}
	for _, c := range []struct {
		name, tenant string
		want         float64
	}{
		{"gpuext_latency_target_p99_seconds", "1", 300e-6},
		{"gpuext_latency_p99_seconds", "1", 450e-6},
		{"gpuext_latency_solo_p99_seconds", "1", 200e-6},
		{"gpuext_latency_target_met", "1", 0},
		{"gpuext_latency_window_requests", "1", 2500},
		{"gpuext_latency_window_requests", "4", 10},
		{"gpuext_best_effort_stalled", "2", 1},
		{"gpuext_best_effort_stalled", "3", 0},
		{"gpuext_latency_best_effort_budget_percent", "", 42},
		{"gpuext_latency_best_effort_sm_percent", "", 21},
		{"gpuext_latency_best_effort_paced", "", 1},
		{"gpuext_latency_best_effort_held", "", 0},
	} {
		if got, ok := value(c.name, c.tenant); !ok || got != c.want {
			t.Errorf("%s{tenant=%q} = %v (present %v), want %v", c.name, c.tenant, got, ok, c.want)
		}
	}
	if _, ok := value("gpuext_latency_target_met", "4"); ok {
		t.Error("a tenant not yet judged has a verdict series")
	}
	if _, ok := value("gpuext_latency_best_effort_budget_bound_percent", ""); ok {
		t.Error("a bound on the budget's cuts shown while none is set")
	}
	st.NoGainBelow = 42 // a cut below 42 bought nothing
	fams = gather(t, r)
	if got, ok := value("gpuext_latency_best_effort_budget_bound_percent", ""); !ok || got != 42 {
		t.Errorf("gpuext_latency_best_effort_budget_bound_percent = %v (present %v), want 42", got, ok)
	}
}
