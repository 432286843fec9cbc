package metrics

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/board"
	"github.com/gpuext/gpuext/devrt/probefiles/maps"
	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/lib/tenantfs"
)

// Bounds of a scrape's reads of the probes' files (a tenant writes them).
const (
	// ProbeBytesPerTenant is the most bytes of one tenant's probe files a
	// scrape reads (each .maps file is also bounded by its module's size:
	// 0.5 MiB for launch-stats' per-warp counters, so about a hundred
	// images' copies).
	ProbeBytesPerTenant = 64 << 20
	// ProbeBytesPerScrape is the most bytes of all tenants' probe files
	// one scrape reads; tenants past it show probe state "over-budget",
	// and the next scrape starts with them.
	ProbeBytesPerScrape = 256 << 20
	// probeStatusBytes bounds one <pid>.status file (a line per image).
	probeStatusBytes = 1 << 20
	// probeEntries bounds the entries of a probes directory.
	probeEntries = 4096
)

// Registry is what the tenant collector reads of the tenant registry
// (*bpf.Registry).
type Registry interface {
	List() ([]bpf.Tenant, error)
	// Stats: the counters the kernel side keeps per tenant.
	Stats(bpf.TenantID) (bpf.GpuextTenantStats, error)
}

// TenantCollector is the per-tenant part of /metrics, read at scrape time:
// the registry's tenants, each tenant's usage file (the device runtime's
// accounting) and probe files under the state dir, and the kernel core's
// per-tenant counters when the core is loaded (Kernel).
type TenantCollector struct {
	reg      Registry
	stateDir string
	kernel   *KernelCollector // nil: never read the kernel side
	// first is the tenant id whose probes the next scrape reads first:
	// the one the last scrape's budget ran out at, so that no tenant's
	// probes go unread for good behind bigger ones.
	first atomic.Uint32
	// probeBudget is ProbeBytesPerScrape (tests lower it).
	probeBudget int64
	// nvml, when set, is the per-process NVML view (gpuext-gpuview).
	nvml *nvmlSource
	// probeCat, when set, returns the probe catalog the views come from
	// (the agent's current core's: built in and its probe directory);
	// nil, or a nil answer, is the built-in catalog.
	probeCat atomic.Pointer[func() *programs.Catalog]
	// reasons: the launch reasons each tenant has shown (probeLaunches).
	reasons launchReasons
}

// SetProbeCatalog makes the probe series render through the catalog f
// returns (SetProbeCatalog(nil): the built-in one).
func (c *TenantCollector) SetProbeCatalog(f func() *programs.Catalog) {
	if f == nil {
		c.probeCat.Store(nil)
		return
	}
	c.probeCat.Store(&f)
}

func (c *TenantCollector) probeCatalog() *programs.Catalog {
	if f := c.probeCat.Load(); f != nil {
		if cat := (*f)(); cat != nil {
			return cat
		}
	}
	return programs.Builtin()
}

// NewTenantCollector reads reg's tenants and their files under stateDir.
// kernel, when set, says whether the gpuext core is loaded: the
// registry's kernel counters are shown only then.
func NewTenantCollector(reg Registry, stateDir string, kernel *KernelCollector) *TenantCollector {
	return &TenantCollector{reg: reg, stateDir: stateDir, kernel: kernel, probeBudget: ProbeBytesPerScrape}
}

func tdesc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, append(append([]string{}, tenantLabels...), extra...), nil)
}

var (
	descQuota = tdesc("gpuext_tenant_quota_bytes",
		"Device-memory quota of the tenant (its policy, as the registry holds it; 0: none).")
	descUsageState = tdesc("gpuext_tenant_usage_state",
		"1 for the state of the tenant's usage file: ok, none (no CUDA process yet), refused (a link, not a regular file, too big), invalid (truncated, not initialised, another tenant's), error.",
		"state")
	descUsed = tdesc("gpuext_tenant_device_memory_used_bytes",
		"Device memory the tenant's live processes hold, from the device runtime's accounting.")
	descPeak = tdesc("gpuext_tenant_device_memory_peak_bytes",
		"Most device memory the tenant held at once, from the device runtime's accounting.")
	descRefused = tdesc("gpuext_tenant_refused_allocations_total",
		"Device-memory allocations the device runtime refused because they would exceed the quota.")
	descDelayed = tdesc("gpuext_tenant_delayed_launches_total",
		"Kernel launches of the tenant the device runtime held back for latency-critical work.")
	descLaunches = tdesc("gpuext_tenant_launches_total",
		"Kernel launches of the tenant the device runtime saw.")
	descContainer = prometheus.NewDesc("gpuext_tenant_container_info",
		"1 for each container (cgroup) of a tenant, with its runtime and container id.",
		append(append([]string{}, tenantLabels...), "runtime", "container_id"), nil)

	descProbeState = tdesc("gpuext_tenant_probe_state",
		"1 for the state of the tenant's device-probe files: ok, refused (the probes directory is a link or too large), over-budget (not read this scrape), error.",
		"state")
	descProbeProcesses = tdesc("gpuext_tenant_probe_processes",
		"Processes of the tenant that wrote device-probe files.")
	descProbeImages = tdesc("gpuext_tenant_probe_images",
		"Images (CUDA modules) of the tenant's processes, by whether the device runtime spliced the probes into them.", "state")
	descProbeSkipped = tdesc("gpuext_tenant_probe_files_skipped",
		"Probe files (or maps in them) of the tenant that were not counted: refused, malformed, over the read bounds.")
	descProbeEvents = tdesc("gpuext_tenant_probe_events_total",
		"A counter of a device probe (its catalog field), summed over the tenant's processes and images.", "probe", "counter")
	descProbeTime = tdesc("gpuext_tenant_probe_time_seconds_total",
		"A time sum of a device probe (a catalog field ending in Ns, here in seconds).", "probe", "counter")
	descProbeSMs = tdesc("gpuext_tenant_probe_sms_used",
		"SMs that ran at least one of the tenant's blocks (sm-histogram probe).", "probe")
	descProbeHashKeys = tdesc("gpuext_tenant_probe_hash_keys",
		"Live keys of a device probe's hash map (a hash view), over the tenant's images.", "probe", "map")
	descProbeHashSum = tdesc("gpuext_tenant_probe_hash_value_total",
		"An unsigned value field of a device probe's hash map summed over every key (per-key values: gpuextctl probes).", "probe", "map", "field")
	descProbeThreadRows = tdesc("gpuext_tenant_probe_thread_rows",
		"Rows (threads of a launch) with a non-zero value in an entry of a device probe's per-thread map (a per-thread view), summed over the tenant's images.", "probe", "map", "field")
	descProbeThreadSum = tdesc("gpuext_tenant_probe_thread_value_total",
		"An entry of a device probe's per-thread map summed over its rows and the tenant's images.", "probe", "map", "field")
	descProbeRecords = tdesc("gpuext_tenant_probe_records_total",
		"Records a device probe wrote to its ring buffer (a records view), over the tenant's images.", "probe", "map")
	descProbeRecordsDropped = tdesc("gpuext_tenant_probe_records_dropped_total",
		"Records of a device probe's ring buffer that did not fit and were dropped.", "probe", "map")
	descProbeHist = tdesc("gpuext_tenant_probe_latency_seconds",
		"A device probe's log2 histogram of times (launch-latency: host launch call to the first block's start). The sum is not measured: NaN.",
		"probe", "map")

	descKFaults   = tdesc("gpuext_kernel_tenant_faults_total", "GPU page faults of the tenant the gpuext core counted.")
	descKPagesIn  = tdesc("gpuext_kernel_tenant_pages_in_total", "Pages migrated to the GPU for the tenant (gpuext core).")
	descKPagesOut = tdesc("gpuext_kernel_tenant_pages_out_total", "Pages migrated off the GPU for the tenant (gpuext core).")
	descKEvict    = tdesc("gpuext_kernel_tenant_evictions_total", "Evictions of the tenant's memory (gpuext core).")
	descKPrefetch = tdesc("gpuext_kernel_tenant_prefetched_pages_total", "Pages prefetched for the tenant (gpuext core).")
	descKAlloc    = tdesc("gpuext_kernel_tenant_device_memory_bytes", "Device memory of the tenant the gpuext core accounts now.")
	descKPeak     = tdesc("gpuext_kernel_tenant_device_memory_peak_bytes", "Most device memory of the tenant the gpuext core accounted at once.")
	descKRefused  = tdesc("gpuext_kernel_tenant_refused_allocations_total", "Allocations of the tenant the gpuext core refused.")
	descKDelayed  = tdesc("gpuext_kernel_tenant_delayed_launches_total", "Launches of the tenant the gpuext core's scheduling held back.")
	descKLaunches = tdesc("gpuext_kernel_tenant_launches_total", "Launches of the tenant the gpuext core saw.")

	descTenants = prometheus.NewDesc("gpuext_metrics_tenants",
		"Tenants in the registry at this scrape.", nil, nil)
	descOmitted = prometheus.NewDesc("gpuext_metrics_tenants_omitted",
		"Tenants this scrape did not show: more than the agent shows at once (1024).", nil, nil)
	descRegistryUp = prometheus.NewDesc("gpuext_registry_up",
		"1 when the tenant registry could be listed at this scrape.", nil, nil)
)

// Describe sends every descriptor the collector can send.
func (c *TenantCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQuota, descUsageState, descUsed, descPeak, descRefused, descDelayed,
		descLaunches, descContainer, descProbeState, descProbeProcesses, descProbeImages, descProbeSkipped,
		descProbeEvents, descProbeTime, descProbeSMs, descProbeHist, descProbeLaunches, descProbeLaunchBlocks,
		descProbeHostLatency, descProbeHostLatencySkipped, descKFaults, descKPagesIn, descKPagesOut,
		descKEvict, descKPrefetch, descKAlloc, descKPeak, descKRefused, descKDelayed, descKLaunches,
		descTenants, descOmitted, descRegistryUp, descNVMLUp, descNVMLUsed, descNVMLUntracked} {
		ch <- d
	}
}

// Collect reads the tenants now.
func (c *TenantCollector) Collect(ch chan<- prometheus.Metric) {
	list, err := c.reg.List()
	if err != nil {
		ch <- gauge(descRegistryUp, 0)
		return
	}
	ch <- gauge(descRegistryUp, 1)
	ch <- gauge(descTenants, float64(len(list)))
	all := list
	omitted := 0
	if len(list) > MaxTenants {
		omitted = len(list) - MaxTenants
		list = list[:MaxTenants] // List sorts by id: the oldest ids stay
	}
	ch <- gauge(descOmitted, float64(omitted))
	kernel := c.kernel != nil && c.kernel.Ready()
	budget := c.probeBudget
	start, _ := slices.BinarySearchFunc(list, bpf.TenantID(c.first.Load()), func(t bpf.Tenant, id bpf.TenantID) int {
		return cmp.Compare(t.ID, id)
	})
	next := uint32(0) // where the next scrape starts: here, unless the budget runs out
	for i := range list {
		t := list[(start+i)%len(list)]
		lv := labelsOf(t)
		ch <- gauge(descQuota, float64(t.Config.QuotaBytes), lv...)
		for _, cg := range t.Cgroups {
			ch <- gauge(descContainer, 1, append(lv, cg.Runtime.String(), labelValue(cg.ContainerID))...)
		}
		c.usage(ch, t, lv)
		read, complete := c.probes(ch, t, lv, budget)
		budget -= read
		if !complete && next == 0 {
			next = uint32(t.ID) // the first tenant whose probes this scrape left unread
		}
		if kernel {
			kernelTenant(ch, c.reg, t.ID, lv)
		}
	}
	c.first.Store(next)
	c.reasons.keep(all)
	if c.nvml != nil {
		collectNVML(ch, c.nvml, all, list)
	}
}

// usageState names what ReadUsage made of a tenant's usage file.
func usageState(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, fs.ErrNotExist):
		return "none"
	case errors.Is(err, tenantfs.ErrRefused):
		return "refused"
	case errors.Is(err, board.ErrUsageInvalid):
		return "invalid"
	}
	return "error"
}

func (c *TenantCollector) usage(ch chan<- prometheus.Metric, t bpf.Tenant, lv []string) {
	u, err := readUsage(admission.AcctDir(c.stateDir, uint64(t.ID)), t.ID)
	state := usageState(err)
	ch <- gauge(descUsageState, 1, append(lv, state)...)
	if state != "ok" {
		return
	}
	ch <- gauge(descUsed, float64(u.UsedBytes), lv...)
	ch <- gauge(descPeak, float64(u.PeakBytes), lv...)
	ch <- counter(descRefused, float64(u.RefusedAllocs), lv...)
	ch <- counter(descDelayed, float64(u.DelayedLaunches), lv...)
	ch <- counter(descLaunches, float64(u.Launches), lv...)
}

// readUsage is board.ReadUsage (no links, a regular file of the layout's
// size, pread). A header whose tenant id is not written yet is no CUDA
// process yet; another tenant's id is an invalid file.
func readUsage(acctDir string, id bpf.TenantID) (board.Usage, error) {
	u, err := board.ReadUsage(acctDir)
	switch {
	case err != nil:
		return u, err
	case u.TenantID == 0:
		return u, fs.ErrNotExist
	case u.TenantID != uint64(id):
		return u, fmt.Errorf("%w: it names tenant %d", board.ErrUsageInvalid, u.TenantID)
	}
	return u, nil
}

// probes shows what the tenant's device probes counted, reading at most
// budget bytes (and ProbeBytesPerTenant); it returns the bytes it read and
// false when the budget left some of them unread.
func (c *TenantCollector) probes(ch chan<- prometheus.Metric, t bpf.Tenant, lv []string, budget int64) (int64, bool) {
	manifest, err := abi.ReadManifest(filepath.Join(admission.TenantDir(c.stateDir, uint64(t.ID)),
		admission.TenantProbesDir, abi.ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, true // no probes selected
	}
	state := func(s string) { ch <- gauge(descProbeState, 1, append(lv, s)...) }
	if err != nil {
		state("error")
		return 0, true
	}
	lim := maps.Limits{Entries: probeEntries, Status: probeStatusBytes, Maps: maps.MaxFileSizeFor(manifest),
		Total: min(budget, ProbeBytesPerTenant)}
	if budget < lim.Maps { // not even one of its files fits
		state("over-budget")
		return 0, false
	}
	dir := filepath.Join(admission.AcctDir(c.stateDir, uint64(t.ID)), admission.AcctProbesDir)
	ten, err := maps.ReadTenantWithin(dir, manifest, lim)
	switch {
	case err != nil:
		state("error")
		return lim.Total, true // what it read is not known: count the most
	case ten.OverTotal && lim.Total < ProbeBytesPerTenant:
		state("over-budget") // the scrape's budget, not the tenant's own bound
	case len(ten.Skipped) > 0 && ten.Processes == 0 && len(ten.Images) == 0:
		state("refused") // nothing read: the dir itself was refused
	default:
		state("ok")
	}
	ch <- gauge(descProbeProcesses, float64(ten.Processes), lv...)
	ch <- gauge(descProbeImages, float64(ten.Patched), append(lv, "patched")...)
	ch <- gauge(descProbeImages, float64(ten.Unpatched), append(lv, "unpatched")...)
	ch <- gauge(descProbeSkipped, float64(len(ten.Skipped)), lv...)
	c.reasons.mu.Lock()
	probeLaunches(ch, ten.Launches, lv, c.reasons.of(t))
	c.reasons.mu.Unlock()
	cat := c.probeCatalog()
	for _, s := range maps.Summarize(ten, cat, manifest.Probes) {
		name := labelValue(s.Name)
		for field, v := range s.Counters {
			if base, ok := strings.CutSuffix(field, "Ns"); ok && base != "" {
				ch <- counter(descProbeTime, float64(v)/1e9, append(lv, name, labelValue(base))...)
				continue
			}
			ch <- counter(descProbeEvents, float64(v), append(lv, name, labelValue(field))...)
		}
		if s.SMs != nil {
			ch <- gauge(descProbeSMs, float64(s.SMs.Used), append(lv, name)...)
		}
		for mapName, h := range s.Hashes {
			ml := append(lv, name, labelValue(mapName))
			ch <- gauge(descProbeHashKeys, float64(h.Keys), ml...)
			for field, v := range h.Sums {
				ch <- counter(descProbeHashSum, float64(v), append(ml, labelValue(field))...)
			}
		}
		for mapName, pt := range s.PerThread {
			ml := append(lv, name, labelValue(mapName))
			for _, e := range pt.Entries {
				ch <- gauge(descProbeThreadRows, float64(e.Used), append(ml, labelValue(e.Name))...)
				ch <- counter(descProbeThreadSum, float64(e.Sum), append(ml, labelValue(e.Name))...)
			}
		}
		for mapName, r := range s.Records {
			ml := append(lv, name, labelValue(mapName))
			ch <- counter(descProbeRecords, float64(r.Count), ml...)
			ch <- counter(descProbeRecordsDropped, float64(r.Dropped), ml...)
		}
		p, ok := cat.Get(s.Name)
		if !ok {
			continue
		}
		for _, v := range p.Views {
			if v.Kind != programs.ViewLog2Histogram || v.Unit != "ns" {
				continue
			}
			if agg := ten.Maps[v.Map]; agg != nil && agg.Images > 0 {
				if m, err := log2Histogram(descProbeHist, agg.Counters, 1e-9, append(lv, name, labelValue(v.Map))...); err == nil {
					ch <- m
				}
			}
		}
	}
	return ten.Read, !(ten.OverTotal && lim.Total < ProbeBytesPerTenant)
}

// log2Histogram is a histogram whose bucket b counts values of bit length
// b ([2^(b-1), 2^b), bucket 0 the value 0), in seconds (scale: seconds per
// unit). Buckets past the last non-empty one are left out.
func log2Histogram(desc *prometheus.Desc, counts []uint64, scale float64, lv ...string) (prometheus.Metric, error) {
	top := -1
	for b, c := range counts {
		if c > 0 {
			top = b
		}
	}
	buckets := map[float64]uint64{}
	var cum uint64
	for b := 0; b <= top && b < 64; b++ {
		cum = satAdd(cum, counts[b])
		upper := math.Ldexp(1, b) // values < 2^b: le 2^b - 1 units
		buckets[(upper-1)*scale] = cum
	}
	total := cum
	for b := 64; b <= top; b++ { // bit length 64 and what a hostile map adds past it
		total = satAdd(total, counts[b])
	}
	return prometheus.NewConstHistogram(desc, total, math.NaN(), buckets, lv...)
}

func satAdd(a, b uint64) uint64 {
	if a+b < a {
		return math.MaxUint64
	}
	return a + b
}

func kernelTenant(ch chan<- prometheus.Metric, reg Registry, id bpf.TenantID, lv []string) {
	st, err := reg.Stats(id)
	if err != nil {
		return
	}
	for _, m := range []struct {
		d *prometheus.Desc
		v uint64
		c bool
	}{{descKFaults, st.Faults, true}, {descKPagesIn, st.PagesIn, true}, {descKPagesOut, st.PagesOut, true},
		{descKEvict, st.Evictions, true}, {descKPrefetch, st.PrefetchedPages, true}, {descKAlloc, st.AllocBytes, false},
		{descKPeak, st.PeakBytes, false}, {descKRefused, st.RefusedAllocs, true}, {descKDelayed, st.DelayedLaunches, true},
		{descKLaunches, st.Launches, true}} {
		if m.c {
			ch <- counter(m.d, float64(m.v), lv...)
		} else {
			ch <- gauge(m.d, float64(m.v), lv...)
		}
	}
}

// gauge and counter are const metrics; a value that cannot be one (a label
// the registry would refuse) is an invalid metric, which the registry
// reports in the scrape's error, never a panic.
func gauge(d *prometheus.Desc, v float64, lv ...string) prometheus.Metric {
	return constMetric(d, prometheus.GaugeValue, v, lv)
}

func counter(d *prometheus.Desc, v float64, lv ...string) prometheus.Metric {
	return constMetric(d, prometheus.CounterValue, v, lv)
}

func constMetric(d *prometheus.Desc, t prometheus.ValueType, v float64, lv []string) prometheus.Metric {
	m, err := prometheus.NewConstMetric(d, t, v, lv...)
	if err != nil {
		return prometheus.NewInvalidMetric(d, err)
	}
	return m
}
