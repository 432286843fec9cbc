package kernelpolicy

import (
	"errors"
	"fmt"
	"sort"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// ErrUnknownPolicy is returned for a name that is not one of the kernel
// policies this package holds (Names). It is not policies.ErrUnknownPolicy,
// which is about the policy model's catalog.
var ErrUnknownPolicy = errors.New("unknown policy")

// ErrCoreMissing is ErrNoCore (the older name).
var ErrCoreMissing = ErrNoCore

type entry struct {
	load   func() (*ebpf.CollectionSpec, error)
	opsMap string
	ops    string // the ops name the core lists (struct gpuext_*_ops.name)
	kind   Kind
}

// catalog: eviction and prefetch policies under their names in
// policies.EvictionAlgorithms and policies.PrefetchAlgorithms.
var catalog = map[string]entry{
	"fifo": {loadFifo, "fifo_ops", "fifo", KindMemory},
	"lru":  {loadLru, "lru_ops", "lru", KindMemory},
	"lfu":  {loadLfu, "lfu_ops", "lfu", KindMemory},
	"mru":  {loadMru, "mru_ops", "mru", KindMemory},

	"freq-decay": {loadFreqDecay, "freq_decay_ops", "freq_decay", KindMemory},

	"tenant-quota":      {loadTenantQuota, "tenant_quota_ops", "tenant_quota", KindMemory},
	"priority-weighted": {loadPrioWeighted, "prio_weighted_ops", "prio_weighted", KindMemory},

	"none":           {loadPrefetchNone, "prefetch_none_ops", "pf_none", KindMemory},
	"always-max":     {loadPrefetchAlwaysMax, "prefetch_always_max_ops", "pf_always_max", KindMemory},
	"stride":         {loadPrefetchStride, "prefetch_stride_ops", "pf_stride", KindMemory},
	"sequential":     {loadPrefetchSequential, "prefetch_sequential_ops", "pf_sequential", KindMemory},
	"tree-threshold": {loadPrefetchTree, "prefetch_tree_ops", "pf_tree", KindMemory},
	// Scheduling (gpuext_sched_ops); see sched.go.
	"sched_priority": {loadSchedPriority, "sched_priority_ops", "sched_priority", KindSched},
	"sched_admit":    {loadSchedAdmit, "sched_admit_ops", "sched_admit", KindSched},
}

// Names lists the policies this package can attach.
func Names() []string {
	names := make([]string, 0, len(catalog))
	for n := range catalog {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Attached is one attached memory policy.  Close detaches it.
type Attached struct {
	Name   string
	coll   *ebpf.Collection // nil for a handle re-opened from a pin
	link   link.Link
	pinned bool
}

// Link is the struct_ops link (pin it to outlive this process).
func (a *Attached) Link() link.Link { return a.link }

// Map returns the policy's map name (a policy's own state, e.g. for stats).
func (a *Attached) Map(name string) (*ebpf.Map, bool) {
	if a.coll == nil {
		return nil, false
	}
	m, ok := a.coll.Maps[name]
	return m, ok
}

// Pinned reports whether the policy's link is pinned (Loader.Attach/Open):
// then Close only drops this handle and the policy stays attached.
func (a *Attached) Pinned() bool { return a.pinned }

// Close detaches an unpinned policy (its tenants get the driver's stock
// behaviour); for a pinned one it only releases this process's handle.
func (a *Attached) Close() error {
	var err error
	if a.link != nil { // nil after a replace: the pinned link holds the new ops
		err = a.link.Close()
	}
	if a.coll != nil {
		a.coll.Close()
	}
	return err
}

// Attach loads the named policy and attaches it as gpuext memory ops.
func Attach(name string) (*Attached, error) {
	e, ok := catalog[name]
	if !ok {
		return nil, fmt.Errorf("attach %q: %w", name, ErrUnknownPolicy)
	}
	if err := DefaultCore().Check(); err != nil {
		return nil, fmt.Errorf("attach %q: %w", name, err)
	}
	spec, err := e.load()
	if err != nil {
		return nil, fmt.Errorf("load %q spec: %w", name, err)
	}
	return attachSpec(name, spec, e.opsMap)
}

// AttachSpec attaches the struct_ops map opsMap of an already parsed spec
// (tests use it for policies outside the catalog).
func AttachSpec(name string, spec *ebpf.CollectionSpec, opsMap string) (*Attached, error) {
	return attachSpec(name, spec, opsMap)
}

func attachSpec(name string, spec *ebpf.CollectionSpec, opsMap string) (*Attached, error) {
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("load %q: %w", name, err)
	}
	m, ok := coll.Maps[opsMap]
	if !ok {
		coll.Close()
		return nil, fmt.Errorf("load %q: no struct_ops map %q", name, opsMap)
	}
	l, err := link.AttachStructOps(link.StructOpsOptions{Map: m})
	if err != nil {
		coll.Close()
		return nil, fmt.Errorf("attach %q: %w", name, err)
	}
	return &Attached{Name: name, coll: coll, link: l}, nil
}
