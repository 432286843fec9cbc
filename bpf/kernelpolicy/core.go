package kernelpolicy

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpuext/gpuext/bpf"
)

// DefaultDebugfsDir is the gpuext core's debugfs directory.
const DefaultDebugfsDir = "/sys/kernel/debug/gpuext"

// ErrNoCore: the gpuext core module (kmod/gpuext) is not loaded, or its
// debugfs directory is not there.
var ErrNoCore = errors.New("gpuext core module not loaded (modprobe gpuext; debugfs must be mounted at /sys/kernel/debug)")

// ErrABIMismatch: the loaded core was built with another GPUEXT_ABI_VERSION
// than this program (it is bpf.ErrABIMismatch, so either works with errors.Is).
var ErrABIMismatch = bpf.ErrABIMismatch

// Kind is the struct_ops type a policy attaches as.
type Kind string

const (
	KindMemory Kind = "memory" // gpuext_mem_ops
	KindSched  Kind = "sched"  // gpuext_sched_ops
)

// Core is the gpuext core module as its debugfs directory shows it.
type Core struct {
	// Dir is the core's debugfs directory (DefaultDebugfsDir; tests use a fake one).
	Dir string
}

// DefaultCore is the core at DefaultDebugfsDir.
func DefaultCore() Core { return Core{Dir: DefaultDebugfsDir} }

func (c Core) dir() string {
	if c.Dir == "" {
		return DefaultDebugfsDir
	}
	return c.Dir
}

// Check returns nil when the core is loaded and speaks this build's ABI:
// ErrNoCore when its debugfs directory is missing, ErrABIMismatch (naming
// both versions) when its abi_version differs from bpf.ABIVersion.
func (c Core) Check() error {
	dir := c.dir()
	if _, err := os.Stat(filepath.Join(dir, "ops")); err != nil {
		return fmt.Errorf("no %s: %w", dir, ErrNoCore)
	}
	data, err := os.ReadFile(filepath.Join(dir, "abi_version"))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("gpuext core reports no ABI version (%s/abi_version missing: a core older than ABI version %d); reload gpuext.ko from this release: %w",
			dir, bpf.ABIVersion, ErrABIMismatch)
	}
	if err != nil {
		return fmt.Errorf("read gpuext core ABI version: %w", err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 32)
	if err != nil {
		return fmt.Errorf("gpuext core ABI version %q: %w", strings.TrimSpace(string(data)), err)
	}
	if uint32(v) != bpf.ABIVersion {
		return fmt.Errorf("gpuext core has ABI version %d, this build has ABI version %d; load the matching gpuext.ko: %w",
			v, bpf.ABIVersion, ErrABIMismatch)
	}
	return nil
}

// OpsStats is one attached ops with the core's counters for it.
type OpsStats struct {
	// Ops is the ops name the core lists (struct gpuext_*_ops.name).
	Ops  string `json:"ops"`
	Kind Kind   `json:"kind"`
	// Classes: the priority classes a sched ops claims (bit = class), 0 for memory ops.
	Classes uint32 `json:"classes"`
	Calls   uint64 `json:"calls"`
	Handled uint64 `json:"handled"`
	Errors  uint64 `json:"errors"`
	Refused uint64 `json:"refused"`
	// Denied: binds a sched ops refused.
	Denied uint64 `json:"denied"`
	// ID is a memory ops' GPUEXT_POLICY_NAMED id (bpf.NamedPolicyID of
	// Ops), 0 from a core that lists none.
	ID uint32 `json:"id,omitempty"`
}

// Stats reads the core's per-ops counters (debugfs ops and sched_ops).
func (c Core) Stats() ([]OpsStats, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	var all []OpsStats
	for _, f := range []struct {
		file string
		kind Kind
	}{{"ops", KindMemory}, {"sched_ops", KindSched}} {
		list, err := readOpsFile(filepath.Join(c.dir(), f.file), f.kind)
		if err != nil {
			return nil, err
		}
		all = append(all, list...)
	}
	return all, nil
}

// readOpsFile parses lines "<name> key value key value ...".
func readOpsFile(path string, kind Kind) ([]OpsStats, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) && kind == KindSched {
		return nil, nil // a core without scheduling ops
	}
	if err != nil {
		return nil, fmt.Errorf("gpuext core counters: %w", err)
	}
	defer f.Close()
	var list []OpsStats
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if len(fields)%2 != 1 {
			return nil, fmt.Errorf("%s: malformed line %q", path, sc.Text())
		}
		s := OpsStats{Ops: fields[0], Kind: kind}
		for i := 1; i < len(fields); i += 2 {
			k, v := fields[i], fields[i+1]
			n, err := strconv.ParseUint(v, 0, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %s of %s: %w", path, k, s.Ops, err)
			}
			switch k {
			case "classes":
				s.Classes = uint32(n)
			case "calls":
				s.Calls = n
			case "handled":
				s.Handled = n
			case "errors":
				s.Errors = n
			case "refused":
				s.Refused = n
			case "denied":
				s.Denied = n
			case "id":
				s.ID = uint32(n)
			}
		}
		list = append(list, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return list, nil
}

// HandRegistry writes the fd of the registry's gpuext_cgroups map to the
// core's registry file, so the core resolves tenants from it.  ErrNoCore
// when the core is not loaded.
func (c Core) HandRegistry(reg *bpf.Registry) error {
	if err := c.Check(); err != nil {
		return err
	}
	m := reg.Maps().Cgroups
	if m == nil {
		return fmt.Errorf("hand registry to gpuext core: registry has no cgroup map")
	}
	path := filepath.Join(c.dir(), "registry")
	if err := os.WriteFile(path, []byte(strconv.Itoa(m.FD())), 0); err != nil {
		return fmt.Errorf("hand registry to gpuext core (%s): %w", path, err)
	}
	return nil
}

// HandRegistryToCore hands reg's gpuext_cgroups map to the core at
// DefaultDebugfsDir (see Core.HandRegistry).
func HandRegistryToCore(reg *bpf.Registry) error {
	return DefaultCore().HandRegistry(reg)
}
