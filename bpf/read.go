package bpf

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cilium/ebpf"

	"github.com/gpuext/gpuext/cgroup"
)

// Lookup returns the tenant cgroup cg belongs to, with all its cgroups.
func (r *Registry) Lookup(cg cgroup.ID) (Tenant, error) {
	c := uint64(cg)
	var cfg GpuextTenantConfig
	if err := r.maps.Cgroups.Lookup(&c, &cfg); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return Tenant{}, fmt.Errorf("look up cgroup %d: %w", cg, ErrNotFound)
		}
		return Tenant{}, fmt.Errorf("look up cgroup %d: %w", cg, err)
	}
	t, err := r.tenant(cfg.TenantId)
	if err != nil {
		return Tenant{}, fmt.Errorf("look up cgroup %d: %w", cg, err)
	}
	return t, nil
}

// LookupKey returns the tenant id of key, and false if the key is unknown.
func (r *Registry) LookupKey(key string) (TenantID, bool, error) {
	var k GpuextTenantKey
	if err := putExact(k.Key[:], key, "tenant key"); err != nil {
		return 0, false, err
	}
	var id uint32
	if err := r.maps.TenantKeys.Lookup(&k, &id); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("look up tenant key %q: %w", key, err)
	}
	return TenantID(id), true, nil
}

// List returns every tenant sorted by id, each with its cgroups sorted by id.
func (r *Registry) List() ([]Tenant, error) {
	recs := map[uint32]GpuextTenantRecord{}
	var (
		id  uint32
		rec GpuextTenantRecord
	)
	err := iterate(r.maps.Tenants, &id, &rec, func() { recs[id] = rec })
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	byTenant, err := r.allMetas()
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	out := make([]Tenant, 0, len(recs))
	for id, rec := range recs {
		out = append(out, tenantOf(id, rec, byTenant[id]))
	}
	slices.SortFunc(out, func(a, b Tenant) int { return int(a.ID) - int(b.ID) })
	return out, nil
}

// Stats returns the counters of tenant id (zero if none were written yet).
func (r *Registry) Stats(id TenantID) (GpuextTenantStats, error) {
	tid := uint32(id)
	var st GpuextTenantStats
	err := r.maps.Stats.Lookup(&tid, &st)
	if err == nil {
		return st, nil
	}
	if !errors.Is(err, ebpf.ErrKeyNotExist) {
		return st, fmt.Errorf("stats of tenant %d: %w", id, err)
	}
	var rec GpuextTenantRecord
	if err := r.maps.Tenants.Lookup(&tid, &rec); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return st, fmt.Errorf("stats of tenant %d: %w", id, ErrNoTenant)
		}
		return st, fmt.Errorf("stats of tenant %d: %w", id, err)
	}
	return st, nil
}

// Tenant returns tenant id with its cgroups; ErrNoTenant when it is not
// registered.
func (r *Registry) Tenant(id TenantID) (Tenant, error) { return r.tenant(uint32(id)) }

// TenantRecord returns tenant id without its cgroups (one map lookup, where
// Tenant walks the cgroup entries); ErrNoTenant when it is not registered.
func (r *Registry) TenantRecord(id TenantID) (Tenant, error) {
	tid := uint32(id)
	var rec GpuextTenantRecord
	if err := r.maps.Tenants.Lookup(&tid, &rec); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return Tenant{}, fmt.Errorf("tenant %d: %w", tid, ErrNoTenant)
		}
		return Tenant{}, fmt.Errorf("tenant %d: %w", tid, err)
	}
	return tenantOf(tid, rec, nil), nil
}

// tenant assembles tenant tid from its record and cgroup entries.
func (r *Registry) tenant(tid uint32) (Tenant, error) {
	var rec GpuextTenantRecord
	if err := r.maps.Tenants.Lookup(&tid, &rec); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return Tenant{}, fmt.Errorf("tenant %d: %w", tid, ErrNoTenant)
		}
		return Tenant{}, fmt.Errorf("tenant %d: %w", tid, err)
	}
	metas, err := r.metasOf(tid)
	if err != nil {
		return Tenant{}, err
	}
	return tenantOf(tid, rec, metas), nil
}

func tenantOf(tid uint32, rec GpuextTenantRecord, metas map[uint64]GpuextCgroupMeta) Tenant {
	t := Tenant{
		ID:      TenantID(tid),
		Key:     cstring(rec.Key[:]),
		Policy:  cstring(rec.Policy[:]),
		Config:  rec.Config,
		Created: time.Unix(0, int64(rec.CreatedNs)),
	}
	for cg, m := range metas {
		t.Cgroups = append(t.Cgroups, CgroupEntry{
			CgroupID:      cgroup.ID(cg),
			CgroupPath:    cstring(m.CgroupPath[:]),
			ContainerID:   cstring(m.ContainerId[:]),
			ContainerName: cstring(m.ContainerName[:]),
			PodName:       cstring(m.PodName[:]),
			PodNamespace:  cstring(m.PodNamespace[:]),
			Runtime:       Runtime(m.Runtime),
		})
	}
	slices.SortFunc(t.Cgroups, func(a, b CgroupEntry) int {
		switch {
		case a.CgroupID < b.CgroupID:
			return -1
		case a.CgroupID > b.CgroupID:
			return 1
		}
		return 0
	})
	return t
}

// cgroupsOf lists the cgroups whose kernel-facing config names tenant tid.
func (r *Registry) cgroupsOf(tid uint32) ([]uint64, error) {
	seen := map[uint64]bool{}
	var (
		cg  uint64
		cfg GpuextTenantConfig
	)
	err := iterate(r.maps.Cgroups, &cg, &cfg, func() {
		if cfg.TenantId == tid {
			seen[cg] = true
		}
	})
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", registryMapGpuextCgroups, err)
	}
	out := make([]uint64, 0, len(seen))
	for cg := range seen {
		out = append(out, cg)
	}
	slices.Sort(out)
	return out, nil
}

func (r *Registry) metasOf(tid uint32) (map[uint64]GpuextCgroupMeta, error) {
	all, err := r.allMetas()
	if err != nil {
		return nil, err
	}
	return all[tid], nil
}

func (r *Registry) allMetas() (map[uint32]map[uint64]GpuextCgroupMeta, error) {
	out := map[uint32]map[uint64]GpuextCgroupMeta{}
	var (
		cg   uint64
		meta GpuextCgroupMeta
	)
	err := iterate(r.maps.CgroupMeta, &cg, &meta, func() {
		if out[meta.TenantId] == nil {
			out[meta.TenantId] = map[uint64]GpuextCgroupMeta{}
		}
		out[meta.TenantId][cg] = meta
	})
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", registryMapGpuextCgMeta, err)
	}
	return out, nil
}

// iterate walks m, calling fn after each entry is read into key and value.
// Concurrent deletes can make the kernel restart a walk; entries may then
// repeat (callers dedupe by key), and an aborted walk is tried again.
func iterate(m *ebpf.Map, key, value any, fn func()) error {
	var err error
	for range 3 {
		it := m.Iterate()
		for it.Next(key, value) {
			fn()
		}
		if err = it.Err(); !errors.Is(err, ebpf.ErrIterationAborted) {
			return err
		}
	}
	return err
}
