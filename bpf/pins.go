package bpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

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

// checkPinnedMap refuses a pin that this build cannot use in place of
// creating the map (type, key and value size, max entries, flags), as
// ebpf.MapSpec.Compatible decides. The error wraps ErrABIMismatch and
// ebpf.ErrMapIncompatible and names the map, what differs and the pin dir.
func checkPinnedMap(pinDir string, m *ebpf.Map, spec *ebpf.MapSpec) error {
	err := spec.Compatible(m)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ebpf.ErrMapIncompatible):
		return fmt.Errorf("pinned map %s: %w: %w, remove %s to reset", spec.Name, err, ErrABIMismatch, pinDir)
	default:
		return fmt.Errorf("check pinned map %s in %s: %w", spec.Name, pinDir, err)
	}
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
