package bpf

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/cgroup"
)

// policyName is the fixed-size policy field of a tenant record.
type policyName = [len(GpuextTenantRecord{}.Policy)]int8

// idSpace bounds tenant ids: they are allocated in [1, idSpace), so that
// kernel-side per-tenant arrays of GPUEXT_MAX_TENANTS entries can be indexed
// by tenant id directly.
const idSpace = uint32(MaxTenants)

// maxAttempts bounds the retry loops that resolve races between writers.
const maxAttempts = 64

// Reserve returns the tenant id of key, allocating one if the key is new.
// It is idempotent per key: for a known key it returns the same id and
// stores policy and cfg as the tenant's current policy and config (also in
// every cgroup already attached). cfg.TenantId and cfg.AbiVersion are set by
// Reserve. Concurrent Reserves of one key, from any number of processes,
// all return the same id.
//
// A Reserve racing the release of the same tenant (Detach of its last
// cgroup, ReleaseTenant) may return an id that is released right after;
// Attach then fails with ErrNoTenant. Upsert retries that case.
func (r *Registry) Reserve(key, policy string, cfg GpuextTenantConfig) (TenantID, error) {
	k, pol, err := reserveArgs(key, policy, &cfg)
	if err != nil {
		return 0, err
	}
	for range maxAttempts {
		var id uint32
		err := r.maps.TenantKeys.Lookup(&k, &id)
		switch {
		case err == nil:
			ok, err := r.updateTenant(id, k, pol, cfg)
			if err != nil {
				return 0, fmt.Errorf("reserve tenant %q: %w", key, err)
			}
			if ok {
				return TenantID(id), nil
			}
		case errors.Is(err, ebpf.ErrKeyNotExist):
			id, ok, err := r.allocate(k, pol, cfg)
			if err != nil {
				return 0, fmt.Errorf("reserve tenant %q: %w", key, err)
			}
			if ok {
				return id, nil
			}
		default:
			return 0, fmt.Errorf("reserve tenant %q: look up key: %w", key, err)
		}
	}
	return 0, fmt.Errorf("reserve tenant %q: still contended after %d attempts", key, maxAttempts)
}

func reserveArgs(key, policy string, cfg *GpuextTenantConfig) (GpuextTenantKey, policyName, error) {
	var (
		k   GpuextTenantKey
		pol policyName
	)
	if key == "" {
		return k, pol, errors.New("tenant key: empty")
	}
	if err := putExact(k.Key[:], key, "tenant key"); err != nil {
		return k, pol, err
	}
	if err := putExact(pol[:], policy, "policy"); err != nil {
		return k, pol, err
	}
	if int(cfg.ProbeCount) > len(cfg.ProbeIds) {
		return k, pol, fmt.Errorf("config probe_count: %d probes, at most %d", cfg.ProbeCount, len(cfg.ProbeIds))
	}
	cfg.AbiVersion = ABIVersion
	cfg.Pad = 0
	return k, pol, nil
}

// updateTenant refreshes the live tenant id that k maps to. It returns
// false when the mapping turned out stale (the tenant is gone), after
// removing it, so the caller retries.
func (r *Registry) updateTenant(id uint32, k GpuextTenantKey, pol policyName, cfg GpuextTenantConfig) (bool, error) {
	var rec GpuextTenantRecord
	err := r.maps.Tenants.Lookup(&id, &rec)
	if errors.Is(err, ebpf.ErrKeyNotExist) || (err == nil && rec.Key != k.Key) {
		// A key always points at a record made before it, and release
		// removes the key first: this is the leftover of a writer that died.
		return false, r.dropKey(k, id)
	}
	if err != nil {
		return false, fmt.Errorf("look up tenant %d: %w", id, err)
	}
	cfg.TenantId = id
	if rec.Policy == pol && rec.Config == cfg {
		return true, nil
	}
	rec.Policy = pol
	rec.Config = cfg
	err = r.maps.Tenants.Update(&id, &rec, ebpf.UpdateExist)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return false, nil // released meanwhile
	}
	if err != nil {
		return false, fmt.Errorf("update tenant %d: %w", id, err)
	}
	return true, r.propagateConfig(id)
}

// propagateConfig writes the tenant's current config (re-read, so the last
// writer's config wins) into every cgroup attached to it.
func (r *Registry) propagateConfig(id uint32) error {
	var rec GpuextTenantRecord
	if err := r.maps.Tenants.Lookup(&id, &rec); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		return fmt.Errorf("look up tenant %d: %w", id, err)
	}
	cgs, err := r.cgroupsOf(id)
	if err != nil {
		return err
	}
	cfg := rec.Config
	cfg.TenantId = id
	for _, cg := range cgs {
		err := r.maps.Cgroups.Update(&cg, &cfg, ebpf.UpdateExist)
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("update cgroup %d: %w", cg, err)
		}
	}
	return nil
}

// allocate claims a free id for k. It returns ok=false (and no error) when
// another writer mapped k first; the claimed id is then given back.
func (r *Registry) allocate(k GpuextTenantKey, pol policyName, cfg GpuextTenantConfig) (TenantID, bool, error) {
	rec := GpuextTenantRecord{Key: k.Key, Policy: pol, CreatedNs: uint64(time.Now().UnixNano()), Config: cfg}
	h := fnv.New32a()
	h.Write(cstringBytes(k.Key[:]))
	start := h.Sum32() % (idSpace - 1)

	var id uint32
	for i := range idSpace - 1 {
		cand := (start+i)%(idSpace-1) + 1
		rec.Config.TenantId = cand
		err := r.maps.Tenants.Update(&cand, &rec, ebpf.UpdateNoExist)
		if err == nil {
			id = cand
			break
		}
		if errors.Is(err, ebpf.ErrKeyExist) {
			continue
		}
		if errors.Is(err, unix.E2BIG) {
			return 0, false, fmt.Errorf("%w: %d tenants", ErrRegistryFull, MaxTenants)
		}
		return 0, false, fmt.Errorf("claim tenant id %d: %w", cand, err)
	}
	if id == 0 {
		return 0, false, fmt.Errorf("%w: no free tenant id below %d", ErrRegistryFull, idSpace)
	}

	giveBack := func() {
		_ = r.maps.Stats.Delete(&id)
		_ = r.maps.Tenants.Delete(&id)
	}
	var zero GpuextTenantStats
	if err := r.maps.Stats.Update(&id, &zero, ebpf.UpdateAny); err != nil {
		giveBack()
		if errors.Is(err, unix.E2BIG) {
			return 0, false, fmt.Errorf("%w: stats map", ErrRegistryFull)
		}
		return 0, false, fmt.Errorf("reset stats of tenant %d: %w", id, err)
	}
	err := r.maps.TenantKeys.Update(&k, &id, ebpf.UpdateNoExist)
	switch {
	case err == nil:
		return TenantID(id), true, nil
	case errors.Is(err, ebpf.ErrKeyExist):
		giveBack() // lost the race for k: exactly one id wins
		return 0, false, nil
	case errors.Is(err, unix.E2BIG):
		giveBack()
		return 0, false, fmt.Errorf("%w: key map", ErrRegistryFull)
	default:
		giveBack()
		return 0, false, fmt.Errorf("map key to tenant %d: %w", id, err)
	}
}

// dropKey removes k if it still maps to id. The kernel has no
// compare-and-delete, so it deletes and puts back a mapping that changed
// in between.
func (r *Registry) dropKey(k GpuextTenantKey, id uint32) error {
	var got uint32
	err := r.maps.TenantKeys.LookupAndDelete(&k, &got)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete tenant key: %w", err)
	}
	if got != id {
		err := r.maps.TenantKeys.Update(&k, &got, ebpf.UpdateNoExist)
		if err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
			return fmt.Errorf("restore tenant key: %w", err)
		}
	}
	return nil
}

// live reports whether tenant id exists and its key maps to it (release
// removes the key first, so a tenant being released is not live).
func (r *Registry) live(id uint32) (GpuextTenantRecord, bool, error) {
	var rec GpuextTenantRecord
	if err := r.maps.Tenants.Lookup(&id, &rec); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return rec, false, nil
		}
		return rec, false, fmt.Errorf("look up tenant %d: %w", id, err)
	}
	var got uint32
	k := GpuextTenantKey{Key: rec.Key}
	if err := r.maps.TenantKeys.Lookup(&k, &got); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return rec, false, nil
		}
		return rec, false, fmt.Errorf("look up key of tenant %d: %w", id, err)
	}
	return rec, got == id, nil
}

// Attach makes cgroup e.CgroupID a member of tenant id: gpuext_cgroups
// gets the tenant's config (what the kernel reads), gpuext_cg_meta the
// entry. ContainerID must fit its field; ContainerName, PodName,
// PodNamespace and CgroupPath are display-only and are cut to their field
// sizes (at a UTF-8 boundary, no marker added). A cgroup attached to
// another tenant moves; the old tenant is released if that was its last
// cgroup, as with Detach.
func (r *Registry) Attach(id TenantID, e CgroupEntry) error {
	if e.CgroupID == 0 {
		return errors.New("attach cgroup: cgroup id 0")
	}
	meta, err := metaOf(e)
	if err != nil {
		return fmt.Errorf("attach cgroup %d: %w", e.CgroupID, err)
	}
	if id == 0 {
		return fmt.Errorf("attach cgroup %d to tenant 0: %w", e.CgroupID, ErrNoTenant)
	}
	tid := uint32(id)
	cg := uint64(e.CgroupID)

	rec, ok, err := r.live(tid)
	if err != nil {
		return fmt.Errorf("attach cgroup %d: %w", cg, err)
	}
	if !ok {
		return fmt.Errorf("attach cgroup %d to tenant %d: %w", cg, id, ErrNoTenant)
	}

	var old GpuextCgroupMeta
	if err := r.maps.CgroupMeta.Lookup(&cg, &old); err != nil {
		old = GpuextCgroupMeta{}
	}

	meta.TenantId = tid
	meta.RegisteredNs = uint64(time.Now().UnixNano())
	if err := r.maps.CgroupMeta.Update(&cg, &meta, ebpf.UpdateAny); err != nil {
		if errors.Is(err, unix.E2BIG) {
			return fmt.Errorf("attach cgroup %d: %w: %d cgroups", cg, ErrRegistryFull, MaxCgroups)
		}
		return fmt.Errorf("attach cgroup %d: write meta: %w", cg, err)
	}
	cfg := rec.Config
	cfg.TenantId = tid
	if err := r.maps.Cgroups.Update(&cg, &cfg, ebpf.UpdateAny); err != nil {
		r.undoAttach(cg, tid)
		if errors.Is(err, unix.E2BIG) {
			return fmt.Errorf("attach cgroup %d: %w: %d cgroups", cg, ErrRegistryFull, MaxCgroups)
		}
		return fmt.Errorf("attach cgroup %d: write config: %w", cg, err)
	}

	// Re-check after writing: a release that started before our writes
	// has removed the key by now (undo); one that starts later sees the
	// cgroup and keeps the tenant.
	now, ok, err := r.live(tid)
	if err != nil {
		return fmt.Errorf("attach cgroup %d: %w", cg, err)
	}
	if !ok {
		r.undoAttach(cg, tid)
		// The release that beat us may have seen our cgroup and kept the
		// tenant; it must not stay behind empty.
		if err := r.releaseIfEmpty(tid, meta.RegisteredNs); err != nil {
			return fmt.Errorf("attach cgroup %d: %w", cg, err)
		}
		return fmt.Errorf("attach cgroup %d to tenant %d: %w (released meanwhile)", cg, id, ErrNoTenant)
	}
	if now.Config != rec.Config {
		// Reserve changed the config between our read and write.
		if err := r.propagateConfig(tid); err != nil {
			return fmt.Errorf("attach cgroup %d: %w", cg, err)
		}
	}
	if old.TenantId != 0 && old.TenantId != tid {
		if err := r.releaseIfEmpty(old.TenantId, old.RegisteredNs); err != nil {
			return fmt.Errorf("attach cgroup %d: release previous tenant %d: %w", cg, old.TenantId, err)
		}
	}
	return nil
}

// undoAttach removes cg's entries if they still belong to tenant tid.
func (r *Registry) undoAttach(cg uint64, tid uint32) {
	var cfg GpuextTenantConfig
	if err := r.maps.Cgroups.Lookup(&cg, &cfg); err == nil && cfg.TenantId == tid {
		_ = r.maps.Cgroups.Delete(&cg)
	}
	var meta GpuextCgroupMeta
	if err := r.maps.CgroupMeta.Lookup(&cg, &meta); err == nil && meta.TenantId == tid {
		_ = r.maps.CgroupMeta.Delete(&cg)
	}
}

// Upsert is Reserve followed by Attach, retried when the tenant is
// released between the two.
func (r *Registry) Upsert(key, policy string, cfg GpuextTenantConfig, e CgroupEntry) (TenantID, error) {
	if e.CgroupID == 0 {
		return 0, fmt.Errorf("upsert tenant %q: cgroup id 0", key)
	}
	if _, err := metaOf(e); err != nil {
		return 0, fmt.Errorf("upsert tenant %q: %w", key, err)
	}
	for range maxAttempts {
		id, err := r.Reserve(key, policy, cfg)
		if err != nil {
			return 0, err
		}
		err = r.Attach(id, e)
		if errors.Is(err, ErrNoTenant) {
			// A release of the key's earlier tenant deletes and restores
			// the key: in that window a new tenant can be reserved, and
			// then lose its key to the next Reserve. With no cgroup,
			// nothing would ever release it.
			if err := r.dropOrphan(uint32(id)); err != nil {
				return 0, fmt.Errorf("upsert tenant %q: %w", key, err)
			}
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("upsert tenant %q: %w", key, err)
		}
		return id, nil
	}
	return 0, fmt.Errorf("upsert tenant %q: still contended after %d attempts", key, maxAttempts)
}

// Detach removes cgroup cg and returns the tenant it belonged to. When
// that was the tenant's last cgroup the tenant is released (record, key
// and stats removed): a tenant only reserved, never attached, is never
// released by Detach. Unknown cgroups give ErrNotFound.
func (r *Registry) Detach(cg cgroup.ID) (TenantID, error) {
	c := uint64(cg)
	var (
		tid  uint32
		meta GpuextCgroupMeta
		cfg  GpuextTenantConfig
	)
	errMeta := r.maps.CgroupMeta.LookupAndDelete(&c, &meta)
	if errMeta != nil && !errors.Is(errMeta, ebpf.ErrKeyNotExist) {
		return 0, fmt.Errorf("detach cgroup %d: delete meta: %w", cg, errMeta)
	}
	errCfg := r.maps.Cgroups.LookupAndDelete(&c, &cfg)
	if errCfg != nil && !errors.Is(errCfg, ebpf.ErrKeyNotExist) {
		return 0, fmt.Errorf("detach cgroup %d: delete config: %w", cg, errCfg)
	}
	attachedNs := uint64(0) // unknown: never release on a config-only leftover
	switch {
	case errMeta == nil:
		tid, attachedNs = meta.TenantId, meta.RegisteredNs
	case errCfg == nil:
		tid = cfg.TenantId
	default:
		return 0, fmt.Errorf("detach cgroup %d: %w", cg, ErrNotFound)
	}
	if err := r.releaseIfEmpty(tid, attachedNs); err != nil {
		return TenantID(tid), fmt.Errorf("detach cgroup %d: %w", cg, err)
	}
	return TenantID(tid), nil
}

// releaseIfEmpty releases tenant tid if no cgroup belongs to it any more.
// attachedNs is when the caller's cgroup was attached to tid: a record
// created later is a new tenant that reused the id (it may be reserved and
// not attached yet), which is left alone.
func (r *Registry) releaseIfEmpty(tid uint32, attachedNs uint64) error {
	var rec GpuextTenantRecord
	if err := r.maps.Tenants.Lookup(&tid, &rec); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		return fmt.Errorf("look up tenant %d: %w", tid, err)
	}
	if rec.CreatedNs > attachedNs {
		return nil
	}
	if cgs, err := r.cgroupsOf(tid); err != nil || len(cgs) > 0 {
		return err
	}

	k := GpuextTenantKey{Key: rec.Key}
	var got uint32
	err := r.maps.TenantKeys.LookupAndDelete(&k, &got)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete key of tenant %d: %w", tid, err)
	}
	if err == nil && got != tid {
		if err := r.maps.TenantKeys.Update(&k, &got, ebpf.UpdateNoExist); err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
			return fmt.Errorf("restore tenant key: %w", err)
		}
	}
	if err != nil || got != tid {
		// Keyless: another release is under way, or its writer died. No
		// Attach can succeed without the key; one that succeeded wrote
		// before the key went, so a count from now on sees it.
		if cgs, err := r.cgroupsOf(tid); err != nil || len(cgs) > 0 {
			return err
		}
		return r.deleteTenant(tid, rec.CreatedNs)
	}

	// We removed the key: no Attach can succeed from now on. One that
	// passed its check before wrote its cgroup already: count again.
	cgs, err := r.cgroupsOf(tid)
	if err != nil || len(cgs) > 0 {
		// Keep the tenant. If a Reserve mapped the key to a new tenant
		// meanwhile, this one stays keyless until its cgroups detach.
		if err2 := r.maps.TenantKeys.Update(&k, &tid, ebpf.UpdateNoExist); err2 != nil && !errors.Is(err2, ebpf.ErrKeyExist) {
			return errors.Join(err, fmt.Errorf("restore key of tenant %d: %w", tid, err2))
		}
		return err
	}
	return r.deleteTenant(tid, rec.CreatedNs)
}

// dropOrphan deletes tenant tid when its key no longer maps to it and no
// cgroup belongs to it: no Attach can reach it and no Detach will release
// it. A live tenant (reserved, not yet attached) is left alone.
func (r *Registry) dropOrphan(tid uint32) error {
	rec, ok, err := r.live(tid)
	if err != nil || ok || rec.CreatedNs == 0 {
		return err
	}
	if cgs, err := r.cgroupsOf(tid); err != nil || len(cgs) > 0 {
		return err
	}
	if _, ok, err := r.live(tid); err != nil || ok { // a release put the key back meanwhile
		return err
	}
	return r.deleteTenant(tid, rec.CreatedNs)
}

// deleteTenant removes the stats and record of tid, if the record is still
// the one created at createdNs.
func (r *Registry) deleteTenant(tid uint32, createdNs uint64) error {
	var rec GpuextTenantRecord
	if err := r.maps.Tenants.Lookup(&tid, &rec); err != nil || rec.CreatedNs != createdNs {
		return nil
	}
	if err := r.maps.Stats.Delete(&tid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete stats of tenant %d: %w", tid, err)
	}
	if err := r.maps.Tenants.Delete(&tid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete tenant %d: %w", tid, err)
	}
	return nil
}

// ReleaseTenant removes tenant id, all its cgroups, its key and its stats.
func (r *Registry) ReleaseTenant(id TenantID) error {
	tid := uint32(id)
	var rec GpuextTenantRecord
	if err := r.maps.Tenants.Lookup(&tid, &rec); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("release tenant %d: %w", id, ErrNoTenant)
		}
		return fmt.Errorf("release tenant %d: %w", id, err)
	}
	// Key first: from here on no Attach to this tenant succeeds.
	if err := r.dropKey(GpuextTenantKey{Key: rec.Key}, tid); err != nil {
		return fmt.Errorf("release tenant %d: %w", id, err)
	}
	cgs, err := r.cgroupsOf(tid)
	if err != nil {
		return fmt.Errorf("release tenant %d: %w", id, err)
	}
	metas, err := r.metasOf(tid)
	if err != nil {
		return fmt.Errorf("release tenant %d: %w", id, err)
	}
	for cg := range metas {
		if !slices.Contains(cgs, cg) {
			cgs = append(cgs, cg)
		}
	}
	for _, cg := range cgs {
		r.undoAttach(cg, tid)
	}
	if err := r.deleteTenant(tid, rec.CreatedNs); err != nil {
		return fmt.Errorf("release tenant %d: %w", id, err)
	}
	return nil
}

func metaOf(e CgroupEntry) (GpuextCgroupMeta, error) {
	var m GpuextCgroupMeta
	if err := putExact(m.ContainerId[:], e.ContainerID, "container id"); err != nil {
		return m, err
	}
	putTruncated(m.ContainerName[:], e.ContainerName)
	putTruncated(m.PodName[:], e.PodName)
	putTruncated(m.PodNamespace[:], e.PodNamespace)
	putTruncated(m.CgroupPath[:], e.CgroupPath)
	m.Runtime = uint32(e.Runtime)
	return m, nil
}
