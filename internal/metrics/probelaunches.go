package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/probefiles/launches"
)

// maxCoverageSeries bounds the reason label values of one tenant over its
// life (the reasons come from files the tenant writes): past it, the rest
// of a class is reason="(other-reasons)".
const maxCoverageSeries = 32

var (
	descProbeLaunches = tdesc("gpuext_tenant_probe_launches_total",
		"Kernel launches of the tenant's processes as the device runtime saw them, by how they can be measured: "+
			`measured="device" (the kernel's image carries the device probes, whose own counts are gpuext_tenant_probe_events_total), `+
			`"host" (the image could not be patched: the reason is the image's, e.g. sass-only, ptx-newer-than-device, jit-failed; `+
			`counted from the launch arguments), "none" (known to have run, kernels unseen: replays of graphs whose nodes could not be read).`,
		"measured", "reason")
	descProbeLaunchBlocks = tdesc("gpuext_tenant_probe_launch_blocks_total",
		"Thread blocks of the tenant's launches (grid sizes from the launch arguments), by how the launches can be measured (as gpuext_tenant_probe_launches_total).",
		"measured")
	descProbeHostLatency = tdesc("gpuext_tenant_probe_host_latency_seconds",
		`Launch latency measured host-side (measured="host"): from the launch call to the kernel's completion, read from a CUDA event `+
			"recorded after the launch on its stream (within half the event clock's calibration round trip), for the launches the device probes "+
			"could not see, with launch-latency selected. The device's launch-latency (launch call to the first block's start) is "+
			"gpuext_tenant_probe_latency_seconds. The sum is not measured: NaN.", "measured")
	descProbeHostLatencySkipped = tdesc("gpuext_tenant_probe_host_latency_skipped_total",
		"Host-measured launches that went without a latency (no free event: at most 64 in flight per context; an event error).")
)

// launchReasons remembers, per tenant, the reason label values its launch
// series have shown: a tenant that writes new reasons at every scrape would
// otherwise make maxCoverageSeries new series each time, without bound over
// time. Once a tenant has shown its share, a new reason is
// reason="(other-reasons)" for as long as the tenant lives.
type launchReasons struct {
	mu   sync.Mutex
	seen map[tenantGen]map[launchKey]bool
}

// tenantGen is one tenant: an id and when it was reserved (a reused id is
// another tenant, with a budget of its own).
type tenantGen struct {
	id      bpf.TenantID
	created int64
}

type launchKey struct {
	m      launches.Measured
	reason string
}

const otherReasons = "(other-reasons)"

// of returns tenant t's shown reasons (the caller holds mu).
func (r *launchReasons) of(t bpf.Tenant) map[launchKey]bool {
	if r.seen == nil {
		r.seen = map[tenantGen]map[launchKey]bool{}
	}
	g := tenantGen{t.ID, t.Created.UnixNano()}
	if r.seen[g] == nil {
		r.seen[g] = map[launchKey]bool{}
	}
	return r.seen[g]
}

// keep forgets the tenants not in live.
func (r *launchReasons) keep(live []bpf.Tenant) {
	r.mu.Lock()
	defer r.mu.Unlock()
	alive := make(map[tenantGen]bool, len(live))
	for _, t := range live {
		alive[tenantGen{t.ID, t.Created.UnixNano()}] = true
	}
	for g := range r.seen {
		if !alive[g] {
			delete(r.seen, g)
		}
	}
}

// probeLaunches shows the tenant's launch table (devrt/probefiles/launches):
// its coverage by class and reason, blocks, and the host-measured latency.
// seen is the reasons the tenant has shown before (launchReasons), updated.
func probeLaunches(ch chan<- prometheus.Metric, tab *launches.Table, lv []string, seen map[launchKey]bool) {
	if tab == nil {
		return
	}
	named := 0
	for k := range seen {
		if k.reason != otherReasons {
			named++
		}
	}
	series := map[launchKey]uint64{}
	for _, c := range tab.Coverage { // the most launches first
		k := launchKey{c.Measured, labelValue(c.Reason)}
		if !seen[k] {
			if named < maxCoverageSeries-len(launches.Measures) {
				seen[k] = true
				named++
			} else {
				k.reason = otherReasons
			}
		}
		series[k] = satAdd(series[k], c.Launches)
	}
	for _, m := range launches.Measures {
		if _, ok := tab.Launches[m]; !ok && m != launches.None {
			continue
		}
		ch <- counter(descProbeLaunchBlocks, float64(tab.Blocks[m]), append(lv, string(m))...)
	}
	for k, v := range series {
		ch <- counter(descProbeLaunches, float64(v), append(lv, string(k.m), k.reason)...)
	}
	if tab.Latency {
		if m, err := log2Histogram(descProbeHostLatency, tab.LatHist[:], 1e-9, append(lv, string(launches.Host))...); err == nil {
			ch <- m
		}
		ch <- counter(descProbeHostLatencySkipped, float64(tab.LatSkipped), lv...)
	}
}
