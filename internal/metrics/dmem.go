package metrics

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup"
)

// DmemCollector is layer 1 of the quota in /metrics, read at scrape time:
// whether the kernel's cgroup dmem controller holds quotas on this node,
// the regions the drivers registered, and each tenant's dmem.current and
// dmem.max per region (a region is one GPU: nvidia/<pci bus id>/vidmem).
type DmemCollector struct {
	reg Registry
	res *cgroup.Resolver // nil: no cgroup v2 here, nothing to show but 0
}

// NewDmemCollector reads reg's tenants and their cgroups below hostRoot.
func NewDmemCollector(reg Registry, hostRoot string) *DmemCollector {
	res, err := cgroup.NewResolver(hostRoot)
	if err != nil {
		res = nil
	}
	return &DmemCollector{reg: reg, res: res}
}

var (
	descDmemController = prometheus.NewDesc("gpuext_dmem_controller",
		"1 when the kernel offers the cgroup dmem controller (Linux 6.14+), else 0.", nil, nil)
	descDmemEnforcing = prometheus.NewDesc("gpuext_dmem_enforcing",
		"1 when the dmem controller can hold GPU memory quotas here: the kernel has it and a GPU driver registered a region "+
			"(NVIDIA r615+); 0: the next layer holds them.", nil, nil)
	descDmemRegion = prometheus.NewDesc("gpuext_dmem_region_capacity_bytes",
		"Size of a dmem region a driver registered (dmem.capacity); one per GPU.", []string{"region"}, nil)
	descDmemCurrent = tdesc("gpuext_tenant_dmem_current_bytes",
		"GPU memory the kernel charged to the tenant's cgroups in a dmem region (dmem.current).", "region")
	descDmemMax = tdesc("gpuext_tenant_dmem_max_bytes",
		"The tenant's hard limit in a dmem region (dmem.max); absent when unlimited.", "region")
)

// Describe implements prometheus.Collector.
func (d *DmemCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range []*prometheus.Desc{descDmemController, descDmemEnforcing, descDmemRegion, descDmemCurrent, descDmemMax} {
		ch <- x
	}
}

// Collect implements prometheus.Collector.
func (d *DmemCollector) Collect(ch chan<- prometheus.Metric) {
	var dm cgroup.Dmem
	if d.res != nil {
		dm, _ = d.res.Dmem() // unreadable: shown as no controller
	}
	ch <- prometheus.MustNewConstMetric(descDmemController, prometheus.GaugeValue, b2f(dm.Controller))
	ch <- prometheus.MustNewConstMetric(descDmemEnforcing, prometheus.GaugeValue, b2f(dm.Controller && len(dm.Regions) > 0))
	if !dm.Controller || len(dm.Regions) == 0 {
		return
	}
	for _, r := range dm.Regions {
		ch <- prometheus.MustNewConstMetric(descDmemRegion, prometheus.GaugeValue, float64(r.Bytes), labelValue(r.Name))
	}
	tenants, err := d.reg.List()
	if err != nil {
		return
	}
	if len(tenants) > MaxTenants {
		tenants = tenants[:MaxTenants] // as the tenant collector does (gpuext_tenants_omitted says how many)
	}
	for _, t := range tenants {
		cur, max := d.tenantDmem(t)
		labels := labelsOf(t)
		for _, region := range sortedKeys(cur) {
			ch <- prometheus.MustNewConstMetric(descDmemCurrent, prometheus.GaugeValue, float64(cur[region]),
				append(labels, labelValue(region))...)
		}
		for _, region := range sortedKeys(max) {
			ch <- prometheus.MustNewConstMetric(descDmemMax, prometheus.GaugeValue, float64(max[region]),
				append(labels, labelValue(region))...)
		}
	}
}

// tenantDmem sums dmem.current over the tenant's cgroups and takes the
// smallest dmem.max, per region; a cgroup is read only while the registry's
// path (cut to its field size) still names it.
func (d *DmemCollector) tenantDmem(t bpf.Tenant) (cur, max map[string]uint64) {
	cur, max = map[string]uint64{}, map[string]uint64{}
	for _, cg := range t.Cgroups {
		if id, err := d.res.IDOf(cg.CgroupPath); err != nil || id != cg.CgroupID {
			continue
		}
		if c, err := d.res.DmemCurrent(cg.CgroupPath); err == nil {
			for region, v := range c {
				cur[region] += v.Bytes
			}
		}
		if m, err := d.res.DmemMax(cg.CgroupPath); err == nil {
			for region, v := range m {
				if have, ok := max[region]; !v.Unlimited && (!ok || v.Bytes < have) {
					max[region] = v.Bytes
				}
			}
		}
	}
	return cur, max
}

func sortedKeys(m map[string]uint64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
