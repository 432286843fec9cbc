package policies

import (
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// ErrUnknownPolicy is returned for a name that is not in the catalog.
var ErrUnknownPolicy = errors.New("unknown policy")

// ErrCoreMissing is returned when the gpuext core module is not loaded.
var ErrCoreMissing = errors.New("gpuext core module not loaded")

type entry struct {
	load   func() (*ebpf.CollectionSpec, error)
	opsMap string
}

// catalog: eviction and prefetch policies under their names in
// policies.EvictionAlgorithms and policies.PrefetchAlgorithms.
var catalog = map[string]entry{
	"fifo": {loadFifo, "fifo_ops"},
	"lru":  {loadLru, "lru_ops"},
	"lfu":  {loadLfu, "lfu_ops"},
	"mru":  {loadMru, "mru_ops"},

	"tenant-quota":      {loadTenantQuota, "tenant_quota_ops"},
	"priority-weighted": {loadPrioWeighted, "prio_weighted_ops"},

	"none":           {loadPrefetchNone, "prefetch_none_ops"},
	"always-max":     {loadPrefetchAlwaysMax, "prefetch_always_max_ops"},
	"stride":         {loadPrefetchStride, "prefetch_stride_ops"},
	"sequential":     {loadPrefetchSequential, "prefetch_sequential_ops"},
	"tree-threshold": {loadPrefetchTree, "prefetch_tree_ops"},
	// Scheduling (gpuext_sched_ops); see sched.go.
	"sched_priority": {loadSchedPriority, "sched_priority_ops"},
	"sched_admit":    {loadSchedAdmit, "sched_admit_ops"},
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
	Name string
	coll *ebpf.Collection
	link link.Link
}

// Link is the struct_ops link (pin it to outlive this process).
func (a *Attached) Link() link.Link { return a.link }

// Map returns the policy's map name (a policy's own state, e.g. for stats).
func (a *Attached) Map(name string) (*ebpf.Map, bool) {
	m, ok := a.coll.Maps[name]
	return m, ok
}

// Close detaches the policy; its tenants get the driver's stock behaviour.
func (a *Attached) Close() error {
	err := a.link.Close()
	a.coll.Close()
	return err
}

// Attach loads the named policy and attaches it as gpuext memory ops.
func Attach(name string) (*Attached, error) {
	e, ok := catalog[name]
	if !ok {
		return nil, fmt.Errorf("attach %q: %w", name, ErrUnknownPolicy)
	}
	if _, err := os.Stat("/sys/module/gpuext"); err != nil {
		return nil, fmt.Errorf("attach %q: %w", name, ErrCoreMissing)
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
