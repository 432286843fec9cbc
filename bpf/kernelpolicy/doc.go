// Package kernelpolicy loads and attaches the struct_ops kernel policies
// (programs for the gpuext_mem_ops and gpuext_sched_ops types that the core
// module kmod/gpuext registers, one C file each), pins their links so they
// outlive the attaching process, and hands the tenant registry's cgroup map
// to the gpuext core (HandRegistryToCore). The policy model that tenants
// select from (catalog, labels, validation) is package policies; this
// package is only its kernel side.
//
// Eviction policies (fifo, lru, lfu, mru, freq-decay, tenant-quota, priority-weighted)
// order the candidates of evict_prepare (tenant-quota and priority-weighted
// also arbitrate a full device across tenants as the system ops); prefetch policies (none, always-max,
// tree-threshold, sequential, stride) choose the region a fault migrates.
// Catalog names are those of policies.EvictionAlgorithms and
// policies.PrefetchAlgorithms.
//
// A policy only asks: it reads eviction candidates and requests moves or a
// prefetch region through the core's kfuncs, which check every request.
// Which tenant uses which policy is the tenant config's choice
// (eviction_policy and prefetch_policy in the registry map); attaching a
// policy makes it available, detaching it returns its tenants to the
// driver's stock behaviour.
//
// Scheduling policies (sched_*.bpf.c, see sched.go) attach as the core's
// gpuext_sched_ops: each claims priority classes, and a tenant's
// priority_class selects the one for its TSGs.  They ask for a timeslice and
// an interleave level at TSG init and admit or refuse a TSG at bind; the
// core checks the bounds and keeps the driver's stock values otherwise.
package kernelpolicy
