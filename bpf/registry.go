package bpf

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/cgroup"
)

// Sentinel errors callers test with errors.Is.
var (
	// ErrNotFound: the cgroup, key or tenant is not registered.
	ErrNotFound = errors.New("not found")
	// ErrNoTenant: the tenant id is not (or no longer) registered. It is also ErrNotFound.
	ErrNoTenant error = &childError{msg: "no such tenant", parent: ErrNotFound}
	// ErrPinDir: the pin directory cannot be created or is not on a bpf filesystem.
	ErrPinDir = errors.New("bad pin directory")
	// ErrABIMismatch: pinned maps were made by a build with another ABI.
	ErrABIMismatch = errors.New("ABI changed")
	// ErrRegistryFull: no tenant id or map slot is left.
	ErrRegistryFull = errors.New("registry full")
)

// policyName is the fixed-size policy field of a tenant record.
type policyName = [len(GpuextTenantRecord{}.Policy)]int8

type childError struct {
	msg    string
	parent error
}

func (e *childError) Error() string { return e.msg }
func (e *childError) Unwrap() error { return e.parent }

// Maps are the registry's maps, shared (never copied) with every BPF object
// that reads the tenant config, e.g. policies and probes built on
// registry_maps.h. They stay owned by the Registry: don't close them.
type Maps struct {
	Cgroups    *ebpf.Map // gpuext_cgroups: cgroup id -> GpuextTenantConfig
	CgroupMeta *ebpf.Map // gpuext_cg_meta: cgroup id -> GpuextCgroupMeta
	Tenants    *ebpf.Map // gpuext_tenants: tenant id -> GpuextTenantRecord
	TenantKeys *ebpf.Map // gpuext_tenant_keys: GpuextTenantKey -> tenant id
	Stats      *ebpf.Map // gpuext_stats: tenant id -> GpuextTenantStats
}

// Replacements returns the maps by their C names, for
// ebpf.CollectionOptions.MapReplacements when loading an object that
// declares them (include registry_maps.h).
func (m Maps) Replacements() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{
		registryMapGpuextCgroups:    m.Cgroups,
		registryMapGpuextCgMeta:     m.CgroupMeta,
		registryMapGpuextTenants:    m.Tenants,
		registryMapGpuextTenantKeys: m.TenantKeys,
		registryMapGpuextStats:      m.Stats,
	}
}

// Registry is a handle on the pinned tenant registry. Any number of handles,
// in any number of processes, may use the same pin directory at once: every
// operation is built from single-element map operations (see doc.go for the
// protocol), never from a lock. A Registry is safe for concurrent use.
type Registry struct {
	pinDir string
	maps   Maps
	// mountedBPFFS is where OpenRegistry mounted a bpf filesystem ("" if
	// the host had one): the caller logs it.
	mountedBPFFS string
}

// MountedBPFFS is the mount point of the bpf filesystem this handle mounted
// when it was opened, "" when the host already had one.
func (r *Registry) MountedBPFFS() string { return r.mountedBPFFS }

// idSpace bounds tenant ids: they are allocated in [1, idSpace), so that
// kernel-side per-tenant arrays of GPUEXT_MAX_TENANTS entries can be indexed
// by tenant id directly.
const idSpace = uint32(MaxTenants)

// maxAttempts bounds the retry loops that resolve races between writers.
const maxAttempts = 64

// OpenRegistry opens the registry pinned in pinDir (DefaultPinDir if
// empty), creating the directory (0700) and the maps (pins 0600) that are
// missing. Existing pins are reused, so a restarted process sees the same
// state; their type and key/value sizes must match this build's ABI, or
// the error is ErrABIMismatch and names the map.
func OpenRegistry(pinDir string) (*Registry, error) {
	if pinDir == "" {
		pinDir = DefaultPinDir
	}
	pinDir = filepath.Clean(pinDir)
	mounted, err := preparePinDir(pinDir)
	if err != nil {
		return nil, err
	}

	spec, err := loadRegistry()
	if err != nil {
		return nil, fmt.Errorf("load registry spec: %w", err)
	}

	r := &Registry{pinDir: pinDir, mountedBPFFS: mounted}
	targets := []struct {
		name string
		dst  **ebpf.Map
	}{
		{registryMapGpuextCgroups, &r.maps.Cgroups},
		{registryMapGpuextCgMeta, &r.maps.CgroupMeta},
		{registryMapGpuextTenants, &r.maps.Tenants},
		{registryMapGpuextTenantKeys, &r.maps.TenantKeys},
		{registryMapGpuextStats, &r.maps.Stats},
	}
	for _, t := range targets {
		ms, ok := spec.Maps[t.name]
		if !ok {
			r.Close()
			return nil, fmt.Errorf("registry spec has no map %s", t.name)
		}
		m, err := openPinnedMap(pinDir, ms)
		if err != nil {
			r.Close()
			return nil, err
		}
		*t.dst = m
	}
	if err := r.checkRecordABI(); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// preparePinDir makes sure pinDir exists with mode 0700 on a bpf filesystem,
// mounting one when the host has none (EnsureBPFFS). It returns the mount
// point it mounted, "" when none was needed.
func preparePinDir(pinDir string) (string, error) {
	mounted, err := EnsureBPFFS(pinDir)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(pinDir, 0o700); err != nil {
		return mounted, fmt.Errorf("%w: create %s: %w", ErrPinDir, pinDir, err)
	}
	if err := requireBPFFS(pinDir); err != nil {
		return mounted, err
	}
	if err := os.Chmod(pinDir, 0o700); err != nil {
		return mounted, fmt.Errorf("%w: chmod %s: %w", ErrPinDir, pinDir, err)
	}
	return mounted, nil
}

func requireBPFFS(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("%w: statfs %s: %w", ErrPinDir, dir, err)
	}
	if uint32(st.Type) != unix.BPF_FS_MAGIC {
		return fmt.Errorf("%w: %s is not on a bpf filesystem (mount one with: mount -t bpf bpf /sys/fs/bpf)", ErrPinDir, dir)
	}
	return nil
}

// openPinnedMap loads the pin of spec in pinDir, or creates and pins the map.
// Two processes creating the same map race on the pin: the loser drops its
// map and loads the winner's.
func openPinnedMap(pinDir string, spec *ebpf.MapSpec) (*ebpf.Map, error) {
	path := filepath.Join(pinDir, spec.Name)
	for range 3 {
		m, err := ebpf.LoadPinnedMap(path, nil)
		if err == nil {
			if err := checkPinnedMap(pinDir, m, spec); err != nil {
				m.Close()
				return nil, err
			}
			if err := os.Chmod(path, 0o600); err != nil {
				m.Close()
				return nil, fmt.Errorf("chmod pinned map %s: %w", spec.Name, err)
			}
			return m, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("open pinned map %s: %w", spec.Name, err)
		}

		s := spec.Copy()
		s.Pinning = ebpf.PinNone
		m, err = ebpf.NewMap(s)
		if err != nil {
			return nil, fmt.Errorf("create map %s: %w", spec.Name, err)
		}
		if err := m.Pin(path); err != nil {
			m.Close()
			if errors.Is(err, os.ErrExist) {
				continue // another process pinned it first: use theirs
			}
			return nil, fmt.Errorf("pin map %s: %w", spec.Name, err)
		}
		if err := os.Chmod(path, 0o600); err != nil {
			m.Close()
			return nil, fmt.Errorf("chmod pinned map %s: %w", spec.Name, err)
		}
		return m, nil
	}
	return nil, fmt.Errorf("open pinned map %s: pin keeps appearing and vanishing at %s", spec.Name, path)
}

func checkPinnedMap(pinDir string, m *ebpf.Map, spec *ebpf.MapSpec) error {
	mismatch := func(what string, got, want any) error {
		return fmt.Errorf("pinned map %s has %s %v, want %v: %w, remove %s to reset",
			spec.Name, what, got, want, ErrABIMismatch, pinDir)
	}
	switch {
	case m.Type() != spec.Type:
		return mismatch("type", m.Type(), spec.Type)
	case m.KeySize() != spec.KeySize:
		return mismatch("key size", m.KeySize(), spec.KeySize)
	case m.ValueSize() != spec.ValueSize:
		return mismatch("value size", m.ValueSize(), spec.ValueSize)
	case m.MaxEntries() != spec.MaxEntries:
		return mismatch("max entries", m.MaxEntries(), spec.MaxEntries)
	}
	return nil
}

// checkRecordABI catches an ABI change that kept the struct sizes: records
// carry the writer's GPUEXT_ABI_VERSION.
func (r *Registry) checkRecordABI() error {
	var (
		id  uint32
		rec GpuextTenantRecord
	)
	it := r.maps.Tenants.Iterate()
	if it.Next(&id, &rec) && rec.Config.AbiVersion != ABIVersion {
		return fmt.Errorf("pinned map %s holds records of ABI version %d, want %d: %w, remove %s to reset",
			registryMapGpuextTenants, rec.Config.AbiVersion, ABIVersion, ErrABIMismatch, r.pinDir)
	}
	if err := it.Err(); err != nil && !errors.Is(err, ebpf.ErrIterationAborted) {
		return fmt.Errorf("read %s: %w", registryMapGpuextTenants, err)
	}
	return nil
}

// Close releases this handle's file descriptors. The pinned state stays.
func (r *Registry) Close() error {
	var errs []error
	for _, m := range []*ebpf.Map{r.maps.Cgroups, r.maps.CgroupMeta, r.maps.Tenants, r.maps.TenantKeys, r.maps.Stats} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	r.maps = Maps{}
	return errors.Join(errs...)
}

// PinDir is the directory holding the registry's pins.
func (r *Registry) PinDir() string { return r.pinDir }

// Maps returns the registry's maps for loading other BPF objects against
// them (see Maps.Replacements). They are valid until Close.
func (r *Registry) Maps() Maps { return r.maps }

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
