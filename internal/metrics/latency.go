package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuext/gpuext/devrt/board"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/internal/latency"
)

// latencyCollector renders the latency controller's status: per
// latency-critical tenant its target, measured p99 and verdict; per
// best-effort tenant whether it is stalled; for the node what the
// controller publishes to best-effort contexts.
type latencyCollector struct {
	status func() (latency.Status, bool)

	target, p99, solo, met, requests, stalled, failed, budget, bound, share, paced, held *prometheus.Desc
}

func newLatencyCollector(status func() (latency.Status, bool)) *latencyCollector {
	t := []string{"tenant"}
	return &latencyCollector{status: status,
		target: prometheus.NewDesc("gpuext_latency_target_p99_seconds",
			"A latency-critical tenant's p99 target in force (its policy's latencyTarget; a relative one once the tenant was seen alone).", t, nil),
		p99: prometheus.NewDesc("gpuext_latency_p99_seconds",
			"A latency-critical tenant's request p99 over the controller's window, as its device runtime measured the requests (upper bound of the histogram bucket).", t, nil),
		solo: prometheus.NewDesc("gpuext_latency_solo_p99_seconds",
			"A latency-critical tenant's request p99 while no best-effort process ran on the node (the base of a relative target).", t, nil),
		met: prometheus.NewDesc("gpuext_latency_target_met",
			"1 while a latency-critical tenant's p99 is within its target, 0 while it is above; absent while not judged (no target, too few requests, no baseline).", t, nil),
		requests: prometheus.NewDesc("gpuext_latency_window_requests",
			"A latency-critical tenant's requests in the controller's window.", t, nil),
		stalled: prometheus.NewDesc("gpuext_best_effort_stalled",
			"1 while a best-effort tenant's processes live but completed no GPU work for the controller's stallAfter.", t, nil),
		failed: prometheus.NewDesc("gpuext_tenant_failed_exits",
			"A tenant's processes that used the GPU and exited with a status other than 0 since the agent's latency controller first saw the tenant (a trainer that stopped on a NaN loss, a server that failed).", t, nil),
		budget: prometheus.NewDesc("gpuext_latency_best_effort_budget_percent",
			"The share of the SMs the latency controller gives the node's best-effort contexts together.", nil, nil),
		bound: prometheus.NewDesc("gpuext_latency_best_effort_budget_bound_percent",
			"While set, the budget below which the latency controller's last cut bought no latency: misses are paced but cut the budget no further, until it expires; absent when none.", nil, nil),
		share: prometheus.NewDesc("gpuext_latency_best_effort_sm_percent",
			"The MPS share a best-effort context created now gets (never above its policy's smPercent); 0: the policies' own.", nil, nil),
		paced: prometheus.NewDesc("gpuext_latency_best_effort_paced",
			"1 while best-effort launches wait out latency-critical requests in progress (the controller's pacing).", nil, nil),
		held: prometheus.NewDesc("gpuext_latency_best_effort_held",
			"1 while best-effort launches are held so that a latency-critical tenant never seen alone is measured alone.", nil, nil),
	}
}

func (c *latencyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.target, c.p99, c.solo, c.met, c.requests, c.stalled, c.failed, c.budget, c.bound, c.share, c.paced, c.held} {
		ch <- d
	}
}

func (c *latencyCollector) Collect(ch chan<- prometheus.Metric) {
	s, ok := c.status()
	if !ok {
		return
	}
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, t := range s.Tenants {
		id := strconv.FormatUint(uint64(t.ID), 10)
		if t.Target != "" || t.P99 > 0 {
			if t.TargetP99 > 0 {
				g(c.target, t.TargetP99.Seconds(), id)
			}
			if t.P99 > 0 {
				g(c.p99, t.P99.Seconds(), id)
			}
			if t.SoloP99 > 0 {
				g(c.solo, t.SoloP99.Seconds(), id)
			}
			g(c.requests, float64(t.Requests), id)
			switch t.Verdict {
			case latency.Met:
				g(c.met, 1, id)
			case latency.Missed:
				g(c.met, 0, id)
			}
		}
		if t.Class == tenantcfg.ClassBestEffort {
			g(c.stalled, b2f(t.Stalled), id)
		}
		g(c.failed, float64(t.FailedExits), id)
	}
	g(c.budget, s.Budget)
	if s.NoGainBelow > 0 {
		g(c.bound, s.NoGainBelow)
	}
	g(c.share, float64(s.SMPercent))
	g(c.paced, b2f(s.Pace == board.PaceRequest))
	g(c.held, b2f(s.Pace == board.PaceHold))
}

// SetLatency makes the latency controller's metrics read status (ok false:
// no controller runs, no series).
func (a *Agent) SetLatency(status func() (latency.Status, bool)) {
	a.mu.Lock()
	a.latencyStatus = status
	a.mu.Unlock()
}

func (a *Agent) latencyNow() (latency.Status, bool) {
	a.mu.Lock()
	f := a.latencyStatus
	a.mu.Unlock()
	if f == nil {
		return latency.Status{}, false
	}
	return f()
}
