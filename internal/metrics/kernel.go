package metrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuext/gpuext/bpf/kernelpolicy"
)

// KernelCore is the gpuext core module as the collector reads it
// (kernelpolicy.Core: its debugfs counters).
type KernelCore interface {
	// Check: nil when the core is loaded and speaks this ABI
	// (kernelpolicy.ErrNoCore when it is not loaded).
	Check() error
	Stats() ([]kernelpolicy.OpsStats, error)
}

// KernelCollector is the kernel side of /metrics: whether the gpuext core
// is loaded, and the counters it keeps per attached policy (ops). Without
// the core it shows gpuext_kernel_core_loaded 0 and nothing else, and the
// tenant collector leaves out the per-tenant kernel counters.
type KernelCollector struct {
	core KernelCore
}

// NewKernelCollector reads core at each scrape.
func NewKernelCollector(core KernelCore) *KernelCollector { return &KernelCollector{core: core} }

// Ready says whether the core is loaded and readable now (the tenant
// collector shows the per-tenant kernel counters only then).
func (k *KernelCollector) Ready() bool { return k.core.Check() == nil }

var (
	descCoreLoaded = prometheus.NewDesc("gpuext_kernel_core_loaded",
		"1 when the gpuext core kernel module is loaded (its debugfs directory is there), else 0.", nil, nil)
	descCoreABI = prometheus.NewDesc("gpuext_kernel_core_abi_match",
		"1 when the loaded gpuext core speaks this agent's ABI version and its counters could be read (only while loaded).", nil, nil)
	opsLabels     = []string{"ops", "kind"}
	descOpsCalls  = prometheus.NewDesc("gpuext_kernel_policy_calls_total", "Calls of an attached kernel policy (struct_ops) by the gpuext core.", opsLabels, nil)
	descOpsHandle = prometheus.NewDesc("gpuext_kernel_policy_handled_total", "Calls the kernel policy handled (did not defer to the driver's default).", opsLabels, nil)
	descOpsErrors = prometheus.NewDesc("gpuext_kernel_policy_errors_total", "Calls whose answer the gpuext core rejected as invalid.", opsLabels, nil)
	descOpsRefuse = prometheus.NewDesc("gpuext_kernel_policy_refused_total", "Requests the kernel policy refused.", opsLabels, nil)
	descOpsDenied = prometheus.NewDesc("gpuext_kernel_policy_denied_total", "Channel binds a scheduling policy denied.", opsLabels, nil)
)

// Describe sends the collector's descriptors.
func (k *KernelCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCoreLoaded, descCoreABI, descOpsCalls, descOpsHandle, descOpsErrors, descOpsRefuse, descOpsDenied} {
		ch <- d
	}
}

// Collect reads the core's counters now.
func (k *KernelCollector) Collect(ch chan<- prometheus.Metric) {
	stats, err := k.core.Stats()
	if errors.Is(err, kernelpolicy.ErrNoCore) {
		ch <- gauge(descCoreLoaded, 0)
		return
	}
	ch <- gauge(descCoreLoaded, 1)
	if err != nil {
		ch <- gauge(descCoreABI, 0)
		return
	}
	ch <- gauge(descCoreABI, 1)
	seen := map[[2]string]bool{}
	for _, s := range stats {
		lv := []string{labelValue(s.Ops), string(s.Kind)}
		if seen[[2]string(lv)] || len(seen) >= MaxTenants {
			continue // a name the core lists twice would be a duplicate series
		}
		seen[[2]string(lv)] = true
		ch <- counter(descOpsCalls, float64(s.Calls), lv...)
		ch <- counter(descOpsHandle, float64(s.Handled), lv...)
		ch <- counter(descOpsErrors, float64(s.Errors), lv...)
		ch <- counter(descOpsRefuse, float64(s.Refused), lv...)
		if s.Kind == kernelpolicy.KindSched {
			ch <- counter(descOpsDenied, float64(s.Denied), lv...)
		}
	}
}
