package bpf

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/cilium/ebpf"
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

// OpenRegistry opens the registry pinned in pinDir (DefaultPinDir if
// empty), creating the directory (0700) and the maps (pins 0600) that are
// missing. Existing pins are reused, so a restarted process sees the same
// state; their type, key and value sizes, max entries and flags must be
// those of this build (ebpf.MapSpec.Compatible), or the error is
// ErrABIMismatch and names the map, what differs and the pin dir.
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
