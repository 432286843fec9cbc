package metrics

import (
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/latency"
	"github.com/gpuext/gpuext/internal/memguard"
	"github.com/gpuext/gpuext/policies"
)

// Agent is the agent's own metrics. It is the admission core's Observer
// (admission.Core.SetObserver): every admission, registration and
// reconcile is counted as it happens.
type Agent struct {
	admissions    *prometheus.CounterVec
	latency       *prometheus.HistogramVec
	requestErrors *prometheus.CounterVec
	failOpen      *prometheus.CounterVec
	registrations *prometheus.CounterVec
	reconciles    *prometheus.CounterVec
	dropped       prometheus.Counter
	reconcileDur  prometheus.Histogram
	lastReconcile prometheus.Gauge

	mu    sync.Mutex
	board func() Board           // the running board publisher, or nil
	guard func() memguard.Status // the GPU memory guard's state, or nil
	// latencyStatus is the latency controller's state (ok false: none runs)
	latencyStatus func() (latency.Status, bool)
	// tenants is the tenant collector of NewRegistry (nil for NewAgent alone)
	tenants *TenantCollector
}

// SetProbeCatalog makes the tenant collector's probe series render through
// the probe catalog f returns (the agent's current core's: it changes when
// the runtime reconfigures the agent). No-op without NewRegistry's collector.
func (a *Agent) SetProbeCatalog(f func() *programs.Catalog) {
	if a.tenants != nil {
		a.tenants.SetProbeCatalog(f)
	}
}

// Board is what the agent's metrics read of the priority board publisher
// (*board.Publisher).
type Board interface {
	Publishes() uint64
	LastPublish() time.Time
}

// AdmissionBuckets are the admission latency histogram's buckets (s):
// 50 us (a decision without probes) to 6.5 s (a probe set's first
// compilation).
var AdmissionBuckets = prometheus.ExponentialBuckets(50e-6, 2, 18)

// NewAgent returns the agent's metrics, registered in r.
func NewAgent(r prometheus.Registerer) *Agent {
	a := &Agent{
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuext_admissions_total",
			Help: "Containers admitted, by runtime path and outcome (admitted, default-policy: fail-open replaced a bad request, without-gpuext: fail-open after an internal error, refused: strict)."},
			[]string{"runtime", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gpuext_admission_duration_seconds",
			Help: "Time the agent took to admit a container (selection, tenant reservation, tenant and accounting dirs).", Buckets: AdmissionBuckets},
			[]string{"runtime"}),
		requestErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuext_admission_errors_total",
			Help: "Admission errors by the gpuext key that was wrong (other: a key no release knows; none: no key, e.g. an internal error) and kind (request, constraint, internal)."},
			[]string{"key", "kind"}),
		failOpen: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuext_fail_open_total",
			Help: "Containers fail-open let start anyway, by runtime path, step (admit, register) and outcome (default-policy, without-gpuext)."},
			[]string{"runtime", "step", "outcome"}),
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuext_registrations_total",
			Help: "Container cgroups registered under their decision's tenant, by runtime path and outcome."},
			[]string{"runtime", "outcome"}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuext_reconcile_runs_total",
			Help: "Periodic reconcile runs, by result (ok, error)."}, []string{"result"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpuext_reconcile_dropped_entries_total",
			Help: "Registry entries reconcile dropped: cgroups that are gone, reservations that never started, orphaned tenants."}),
		reconcileDur: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gpuext_reconcile_duration_seconds",
			Help: "Time one reconcile run took.", Buckets: prometheus.ExponentialBuckets(100e-6, 4, 10)}),
		lastReconcile: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpuext_reconcile_last_success_timestamp_seconds",
			Help: "When reconcile last finished without an error (Unix time)."}),
	}
	r.MustRegister(a.admissions, a.latency, a.requestErrors, a.failOpen, a.registrations, a.reconciles, a.dropped,
		a.reconcileDur, a.lastReconcile)
	for _, o := range []admission.Outcome{admission.OutcomeAdmitted, admission.OutcomeDefault, admission.OutcomeWithout, admission.OutcomeRefused} {
		a.admissions.WithLabelValues("containerd", string(o)) // 0 before the first: rate() and alerts see the series
	}
	for _, res := range []string{"ok", "error"} {
		a.reconciles.WithLabelValues(res)
	}
	r.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gpuext_board_publishes_total",
		Help: "Times the priority board publisher read the latency-critical tenants and wrote the board."}, a.publishes))
	r.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gpuext_board_publish_age_seconds",
		Help: "Seconds since the board publisher last wrote the board: its lag. About 0.001 while a latency-critical tenant runs, at most 0.1 otherwise; -1 when no publisher runs."}, a.publishAge))
	guardFunc := func(name, help string, counter bool, f func(memguard.Status) float64) prometheus.Collector {
		v := func() float64 {
			a.mu.Lock()
			g := a.guard
			a.mu.Unlock()
			if g == nil {
				return 0
			}
			return f(g())
		}
		if counter {
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, v)
		}
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, v)
	}
	r.MustRegister(newLatencyCollector(a.latencyNow))
	r.MustRegister(
		guardFunc("gpuext_memory_guard_up", "1 while the GPU memory guard reads every GPU's processes from NVML (gpuext-gpuview --watch); 0 when it is off, has no driver or its last sample failed.", false,
			func(s memguard.Status) float64 { return b2f(s.Up) }),
		guardFunc("gpuext_memory_guard_sample_age_seconds", "Seconds since the GPU memory guard's last NVML sample; -1 before the first.", false,
			func(s memguard.Status) float64 {
				if s.LastSample.IsZero() {
					return -1
				}
				return time.Since(s.LastSample).Seconds()
			}),
		guardFunc("gpuext_memory_guard_samples_total", "NVML samples the GPU memory guard checked.", true,
			func(s memguard.Status) float64 { return float64(s.Samples) }),
		guardFunc("gpuext_memory_guard_overruns_total", "Times a tenant went over its GPU memory quota plus margins on a GPU with a report-only action (each overrun counted once).", true,
			func(s memguard.Status) float64 { return float64(s.Overruns) }),
		guardFunc("gpuext_memory_guard_kills_total", "Processes the GPU memory guard stopped (SIGKILL) because their tenant went over its quota plus margins.", true,
			func(s memguard.Status) float64 { return float64(s.Kills) }),
		guardFunc("gpuext_memory_guard_kill_errors_total", "Times the GPU memory guard could not stop a process of a tenant over its quota (the process left, or its pid now names another cgroup's).", true,
			func(s memguard.Status) float64 { return float64(s.KillErrors) }),
	)
	return a
}

// SetMemoryGuard makes the memory guard metrics read status.
func (a *Agent) SetMemoryGuard(status func() memguard.Status) {
	a.mu.Lock()
	a.guard = status
	a.mu.Unlock()
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// SetBoard makes the board metrics read the publisher board returns (the
// agent's current one: it changes when the runtime reconfigures the agent).
func (a *Agent) SetBoard(board func() Board) {
	a.mu.Lock()
	a.board = board
	a.mu.Unlock()
}

func (a *Agent) currentBoard() Board {
	a.mu.Lock()
	f := a.board
	a.mu.Unlock()
	if f == nil {
		return nil
	}
	return f()
}

func (a *Agent) publishes() float64 {
	if b := a.currentBoard(); b != nil {
		return float64(b.Publishes())
	}
	return 0
}

func (a *Agent) publishAge() float64 {
	b := a.currentBoard()
	if b == nil {
		return -1
	}
	last := b.LastPublish()
	if last.IsZero() {
		return -1
	}
	return time.Since(last).Seconds()
}

// Admitted counts one Admit call (admission.Observer).
func (a *Agent) Admitted(info admission.ContainerInfo, d admission.Decision, err error, took time.Duration) {
	rt := info.Runtime.String()
	outcome := admission.OutcomeOf(d, err)
	a.admissions.WithLabelValues(rt, string(outcome)).Inc()
	a.latency.WithLabelValues(rt).Observe(took.Seconds())
	bad := err
	switch {
	case bad == nil && d.RequestErr != nil:
		bad = d.RequestErr
	case bad == nil && d.Skipped:
		bad = d.Err
	}
	if bad != nil {
		a.requestErrors.WithLabelValues(ErrorKey(bad), string(admission.KindOf(bad))).Inc()
	}
	if err == nil && d.FailedOpen {
		a.failOpen.WithLabelValues(rt, "admit", string(outcome)).Inc()
	}
}

// Registered counts one Register call (admission.Observer).
func (a *Agent) Registered(info admission.ContainerInfo, d admission.Decision, err error) {
	rt := info.Runtime.String()
	outcome := admission.OutcomeOf(d, err)
	a.registrations.WithLabelValues(rt, string(outcome)).Inc()
	if err == nil && d.Skipped && d.Err != nil { // registration itself failed open
		a.requestErrors.WithLabelValues(ErrorKey(d.Err), string(admission.KindOf(d.Err))).Inc()
		a.failOpen.WithLabelValues(rt, "register", string(outcome)).Inc()
	}
}

// Reconciled counts one Reconcile run (admission.Observer).
func (a *Agent) Reconciled(dropped int, err error, took time.Duration) {
	a.dropped.Add(float64(dropped))
	a.reconcileDur.Observe(took.Seconds())
	if err != nil {
		a.reconciles.WithLabelValues("error").Inc()
		return
	}
	a.reconciles.WithLabelValues("ok").Inc()
	a.lastReconcile.SetToCurrentTime()
}

// ErrorKey is the gpuext key an admission error names, as a label value:
// one of policies.Keys without its scope (quota.gpuext.io/container.web
// counts as quota.gpuext.io), "other" for any other key (a typo, or what a
// tenant made up: never the key itself, which would let tenants make
// series), "none" for an error that names no key.
func ErrorKey(err error) string {
	var ke *policies.KeyError
	if !errors.As(err, &ke) {
		return "none"
	}
	base, _, _ := strings.Cut(ke.Key, "/")
	for _, k := range policies.Keys {
		if base == k {
			return k
		}
	}
	return "other"
}
