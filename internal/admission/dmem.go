package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
)

// Layer 1 of the GPU memory quota: the kernel's cgroup dmem controller.
// Where the kernel has it (6.14+) and the GPU's driver registered a region
// (NVIDIA r615+: "nvidia/<pci bus id>/vidmem"; gpusim in the kernel lab),
// the tenant's quota on that GPU is written into dmem.max of each of its
// cgroups, and the kernel refuses an allocation past it with out-of-memory,
// whatever the process does. Elsewhere the next layers hold the quota and
// nothing fails. applyDmem is the one step, called where a cgroup is
// attached (admission's Register, and a restarted agent's Synchronize), by
// a policy change for every cgroup of the tenant, and by Reconcile, which
// rewrites a dmem.max that drifted.

// Quota layers, as gpuextctl tenants and the docs name them.
const (
	LayerDmem  = "dmem"  // the kernel's dmem.max holds it
	LayerDevrt = "devrt" // the device runtime in the process (the fast path; a process can bypass it)
)

// NodeGPU is one GPU of the node as NVML discovery saw it.
type NodeGPU struct {
	Index    int
	UUID     string
	PCIBusID string // as NVML reports it; "" when not known
}

// SetNodeGPUs gives the core the node's GPUs (discovery, or the config's
// devicePlugin.gpus), by which a tenant's GPU indices find their dmem
// regions, and says in the log, once, which of them the kernel's dmem
// controller holds quotas on (where the kernel has it). Call it before the
// core is shared. Without it, a tenant whose quota applies on every GPU is
// held on every NVIDIA region of dmem.capacity, and one given GPUs by index
// is not held by dmem (logged once per tenant cgroup).
func (c *Core) SetNodeGPUs(gpus []NodeGPU) {
	c.nodeGPUs = slices.Clone(gpus)
	dm, err := c.resolver.Dmem()
	if err != nil || !dm.Controller {
		return
	}
	var held []int
	for _, g := range c.nodeGPUs {
		q := DmemQuota{GPU: g.Index, PCIBusID: g.PCIBusID}
		r, err := cgroup.NVIDIARegion(g.PCIBusID)
		if err != nil {
			continue // said when a tenant on it is admitted (errNoBusID)
		}
		q.Region = r
		if _, ok := dm.Region(r); ok {
			held = append(held, g.Index)
			continue
		}
		c.sayNoRegion(c.log, q, dm)
	}
	if len(held) > 0 && c.dmemNotice.once("holds") {
		c.log.WithFields(logrus.Fields{"gpus": held, "regions": len(dm.Regions)}).
			Info("dmem: the kernel's dmem controller holds the GPU memory quotas of these GPUs (dmem.max of each tenant cgroup)")
	}
}

// sayNoRegion says, once per node and region, that the kernel has the dmem
// controller but the GPU's driver registered no region for it.
func (c *Core) sayNoRegion(log *logrus.Entry, q DmemQuota, dm cgroup.Dmem) {
	if c.dmemNotice.once("noregion/" + q.Region) {
		log.WithFields(logrus.Fields{"gpu": q.GPU, "pciBusID": q.PCIBusID, "region": q.Region, "regions": len(dm.Regions)}).
			Warn("dmem: the kernel has the dmem controller but the GPU's driver registered no region (NVIDIA before r615): " +
				"its quota is held by the next layer")
	}
}

// DmemQuota is a tenant's quota on one GPU: Bytes, 0 for no limit.
type DmemQuota struct {
	GPU      int    // NVML index; -1 when only the region is known
	PCIBusID string // "" when not known: then Region must be set
	Region   string // "" to derive it from PCIBusID (NVIDIA's name)
	Bytes    uint64
}

// DmemApplied is what ApplyDmem did for one cgroup.
type DmemApplied struct {
	// Enabled: the ancestors whose cgroup.subtree_control got +dmem.
	Enabled []string
	// Held: the quotas now in dmem.max (their Region set).
	Held []DmemQuota
	// NoRegion: the GPUs whose driver registered no region: the next
	// layer holds their quota.
	NoRegion []DmemQuota
}

// ApplyDmem writes quotas into dmem.max of the cgroup at cgPath, after
// enabling dmem along its path; dm is the node's controller and regions
// (cgroup.Resolver.Dmem). A quota of 0 writes "max" (no limit: a policy
// change that drops the quota lifts it). A GPU without a region is listed
// in NoRegion, not an error. It fails with cgroup.ErrNoDmem when the kernel
// has no controller.
func ApplyDmem(res *cgroup.Resolver, dm cgroup.Dmem, cgPath string, quotas []DmemQuota) (DmemApplied, error) {
	var out DmemApplied
	if !dm.Controller {
		return out, cgroup.ErrNoDmem
	}
	var held []DmemQuota
	for _, q := range quotas {
		if q.Region == "" {
			r, err := cgroup.NVIDIARegion(q.PCIBusID)
			if err != nil {
				return out, fmt.Errorf("GPU %d: %w", q.GPU, err)
			}
			q.Region = r
		}
		if _, ok := dm.Region(q.Region); !ok {
			out.NoRegion = append(out.NoRegion, q)
			continue
		}
		held = append(held, q)
	}
	if len(held) == 0 {
		return out, nil
	}
	if !slices.ContainsFunc(held, func(q DmemQuota) bool { return q.Bytes > 0 }) {
		// No quota: lift one a policy change left, but a cgroup that never
		// had dmem.max (dmem not enabled along its path) is left as it is.
		if _, err := res.DmemMax(cgPath); err != nil {
			return out, nil
		}
	}
	enabled, err := res.EnableDmem(cgPath)
	out.Enabled = enabled
	if err != nil {
		return out, err
	}
	for _, q := range held {
		v := cgroup.DmemValue{Bytes: q.Bytes, Unlimited: q.Bytes == 0}
		if err := res.SetDmemMax(cgPath, q.Region, v); err != nil {
			return out, err
		}
		out.Held = append(out.Held, q)
	}
	return out, nil
}

// EnforcingLayer says which layer holds a cgroup's quota, from its dmem.max
// (nil when it has none): LayerDmem when it limits some region, else
// LayerDevrt when the tenant has a quota, else "-".
func EnforcingLayer(dmemMax map[string]cgroup.DmemValue, quotaBytes uint64) string {
	for _, v := range dmemMax {
		if !v.Unlimited {
			return LayerDmem
		}
	}
	if quotaBytes > 0 {
		return LayerDevrt
	}
	return "-"
}

// dmemNotice keeps the node-wide dmem notices to once per agent.
type dmemNotice struct {
	mu   sync.Mutex
	said map[string]bool
}

// once reports whether key is new (and remembers it; past maxNotices keys
// it forgets them all, so a long-lived agent's churn of tenants stays bounded).
func (n *dmemNotice) once(key string) bool {
	const maxNotices = 4096
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.said == nil || len(n.said) >= maxNotices {
		n.said = map[string]bool{}
	}
	if n.said[key] {
		return false
	}
	n.said[key] = true
	return true
}

// tenantQuotas is tenant id's quota per GPU from its config.json (the
// host's file): the GPUs the scheduler gave it, or, with none listed,
// QuotaBytes on every GPU of the node (the node's GPUs from discovery, else
// every NVIDIA region of dm).
func (c *Core) tenantQuotas(id bpf.TenantID, dm cgroup.Dmem) ([]DmemQuota, error) {
	data, err := os.ReadFile(filepath.Join(c.tenantDir(id), TenantConfigFile))
	if err != nil {
		return nil, fmt.Errorf("tenant %d: its quotas: %w", id, err)
	}
	var tf tenantcfg.File
	if err := json.Unmarshal(data, &tf); err != nil {
		return nil, fmt.Errorf("tenant %d config.json: %w", id, err)
	}
	byIndex := func(i int) (NodeGPU, bool) {
		j := slices.IndexFunc(c.nodeGPUs, func(g NodeGPU) bool { return g.Index == i })
		if j < 0 {
			return NodeGPU{}, false
		}
		return c.nodeGPUs[j], true
	}
	var out []DmemQuota
	if len(tf.GPUs) > 0 {
		if len(tf.GPUQuotaBytes) != len(tf.GPUs) {
			return nil, fmt.Errorf("tenant %d config.json: %d GPUs, %d quotas", id, len(tf.GPUs), len(tf.GPUQuotaBytes))
		}
		for i, g := range tf.GPUs {
			ng, ok := byIndex(g)
			if !ok || ng.PCIBusID == "" {
				return nil, fmt.Errorf("tenant %d: GPU %d: %w", id, g, errNoBusID)
			}
			out = append(out, DmemQuota{GPU: g, PCIBusID: ng.PCIBusID, Bytes: tf.GPUQuotaBytes[i]})
		}
		return out, nil
	}
	if len(c.nodeGPUs) > 0 {
		for _, g := range c.nodeGPUs {
			if g.PCIBusID == "" {
				return nil, fmt.Errorf("tenant %d: GPU %d: %w", id, g.Index, errNoBusID)
			}
			out = append(out, DmemQuota{GPU: g.Index, PCIBusID: g.PCIBusID, Bytes: tf.QuotaBytes})
		}
		return out, nil
	}
	for _, r := range dm.Regions {
		if strings.HasPrefix(r.Name, "nvidia/") && strings.HasSuffix(r.Name, "/vidmem") {
			out = append(out, DmemQuota{GPU: -1, Region: r.Name, Bytes: tf.QuotaBytes})
		}
	}
	return out, nil
}

var errNoBusID = errors.New("its PCI bus id is not known (GPU discovery did not run or did not report it): its dmem region cannot be found")

// applyDmem is layer 1 for one cgroup of tenant id (see the top of this
// file). It never fails the caller: what it cannot do is logged (with
// fields), and the next layers hold the quota. A node without the
// controller is silent; one with the controller but no region for a GPU
// says so once.
func (c *Core) applyDmem(id bpf.TenantID, cgPath string, log *logrus.Entry) {
	dm, err := c.resolver.Dmem()
	if err != nil {
		if c.dmemNotice.once("detect") {
			log.WithError(err).Warn("dmem: the cgroup dmem controller cannot be read: the quota is held by the next layer")
		}
		return
	}
	if !dm.Controller {
		return
	}
	// Reconcile calls this again and again: a failure is said once per tenant cgroup and error.
	failed := func(err error) {
		if c.dmemNotice.once(fmt.Sprintf("err/%d/%s/%v", id, cgPath, err)) {
			log.WithError(err).WithField("cgroup", cgPath).Warn("dmem: the tenant's quota is not written into dmem.max: the next layer holds it")
		}
	}
	quotas, err := c.tenantQuotas(id, dm)
	if err != nil {
		failed(err)
		return
	}
	applied, err := ApplyDmem(c.resolver, dm, cgPath, quotas)
	for _, q := range applied.NoRegion {
		c.sayNoRegion(log, q, dm)
	}
	if len(applied.Enabled) > 0 {
		log.WithFields(logrus.Fields{"cgroup": cgPath, "enabled": applied.Enabled}).
			Info("dmem: enabled the dmem controller in cgroup.subtree_control along the tenant's path")
	}
	if err != nil {
		failed(err)
		return
	}
	for _, q := range applied.Held {
		log.WithFields(logrus.Fields{"cgroup": cgPath, "gpu": q.GPU, "region": q.Region, "quotaBytes": q.Bytes}).
			Debug("dmem: quota written into dmem.max")
	}
}

// applyDmemEntry is applyDmem for a cgroup the registry holds: its stored
// path is used only while it still names that cgroup (it is cut to its
// field size, and a path can be reused).
func (c *Core) applyDmemEntry(id bpf.TenantID, cg bpf.CgroupEntry, log *logrus.Entry) {
	if have, err := c.resolver.IDOf(cg.CgroupPath); err != nil || have != cg.CgroupID {
		log.WithFields(logrus.Fields{"cgroup": cg.CgroupPath, "cgroupID": cg.CgroupID}).
			Debug("dmem: the registry's cgroup path no longer names the cgroup: dmem.max left as it is")
		return
	}
	c.applyDmem(id, cg.CgroupPath, log)
}
