package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/probe/compile"
	"github.com/gpuext/gpuext/internal/atomicfile"
	"github.com/gpuext/gpuext/policies"
)

// acctDir is the tenant's writable accounting directory (the device
// runtime's shared usage file). It is separate from the read-only tenant
// directory, so a tenant can write its usage but not its limits.
func (c *Core) acctDir(id bpf.TenantID) string { return AcctDir(c.cfg.StateDir, uint64(id)) }

// The state directory's layout: tenants/<id> (TenantDir: config.json and
// the compiled probes), acct/<id> (AcctDir: usage and probe output), board.
const (
	stateTenants = "tenants"
	stateAcct    = "acct"
)

// TenantDir is tenant id's directory under stateDir.
func TenantDir(stateDir string, id uint64) string {
	return filepath.Join(stateDir, stateTenants, strconv.FormatUint(id, 10))
}

// AcctDir is tenant id's accounting directory under stateDir.
func AcctDir(stateDir string, id uint64) string {
	return filepath.Join(stateDir, stateAcct, strconv.FormatUint(id, 10))
}

// TenantsRoot is the directory of all tenant directories under stateDir.
func TenantsRoot(stateDir string) string { return filepath.Join(stateDir, stateTenants) }

// boardDir holds the host-published, read-only priority board.
func (c *Core) boardDir() string { return filepath.Join(c.cfg.StateDir, "board") }

func (c *Core) makeAcctDir(id bpf.TenantID) (string, error) {
	dir := c.acctDir(id)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", fmt.Errorf("tenant accounting dir: %w", err)
		}
	} else if err != nil {
		return dir, nil // exists: mode already set
	}
	// Any user of the container may run CUDA processes: world-writable,
	// sticky, and private to the tenant because only its containers mount it.
	if err := os.Chmod(dir, 0o777|fs.ModeSticky); err != nil {
		return "", fmt.Errorf("tenant accounting dir: %w", err)
	}
	return dir, nil
}

func (c *Core) tenantDir(id bpf.TenantID) string { return TenantDir(c.cfg.StateDir, uint64(id)) }

// TenantFile is the config.json the device runtime reads (docs/injection.md).
type TenantFile struct {
	ABIVersion  uint32 `json:"abiVersion"`
	TenantID    uint32 `json:"tenantId"`
	TenantKey   string `json:"tenantKey"`
	Policy      string `json:"policy"`
	Class       string `json:"priorityClass"`
	QuotaBytes  uint64 `json:"quotaBytes"`
	TimesliceUS uint32 `json:"timesliceUs"`
	Interleave  uint32 `json:"interleave"`
	// ActiveWindowUS: how long a latency-critical tenant counts as active
	// after its last launch (the device runtime's priority gate).
	ActiveWindowUS uint32 `json:"activeWindowUs"`
	// SMPercent: a best-effort tenant's share of the SMs under MPS.
	SMPercent uint32   `json:"smPercent"`
	Eviction  string   `json:"eviction"`
	Prefetch  string   `json:"prefetch"`
	Probes    []string `json:"probes"`
	// ProbeKernels: the kernels (.entry names) the probes are limited to,
	// as the kernel lines of probes/module.conf: the container's
	// probe-kernels.gpuext.io narrowed by the probes' catalog kernels.
	// Empty: every kernel (or no probes).
	ProbeKernels []string `json:"probeKernels"`
}

// writeTenantDir writes the tenant's config.json and its probes/ directory
// (the compiled probe module, or none when probes is nil).
func (c *Core) writeTenantDir(id bpf.TenantID, key string, p policies.Policy, probes *compile.Bundle) (string, error) {
	dir := c.tenantDir(id)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", fmt.Errorf("tenant dir: %w", err)
		}
	}
	probesDir := filepath.Join(dir, TenantProbesDir)
	if probes != nil {
		if err := probes.WriteDir(probesDir); err != nil {
			return "", fmt.Errorf("tenant probes: %w", err)
		}
	} else if err := compile.RemoveDir(probesDir); err != nil {
		return "", fmt.Errorf("tenant probes: %w", err)
	}
	probeNames := p.Probes
	if probeNames == nil {
		probeNames = []string{}
	}
	probeKernels := []string{}
	if probes != nil && len(probes.Manifest.Kernels) > 0 {
		probeKernels = probes.Manifest.Kernels
	}
	tf := TenantFile{
		ABIVersion: abiVersion, TenantID: uint32(id), TenantKey: key, Policy: p.Name,
		Class: string(p.Priority.Class), QuotaBytes: p.Memory.QuotaBytes, TimesliceUS: p.Priority.TimesliceUS,
		Interleave: p.Priority.Interleave, ActiveWindowUS: p.Priority.ActiveWindowUS, SMPercent: p.Priority.EffectiveSMPercent(), Eviction: p.Memory.Eviction.Name, Prefetch: p.Memory.Prefetch.Name,
		Probes: probeNames, ProbeKernels: probeKernels,
	}
	b, err := json.MarshalIndent(tf, "", "  ")
	if err != nil {
		return "", err
	}
	b = append(b, '\n')
	path := filepath.Join(dir, TenantConfigFile)
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, b) {
		return dir, nil // unchanged: a second container of the tenant, or a re-admission
	}
	if err := atomicfile.Write(path, b, 0o644); err != nil {
		return "", fmt.Errorf("tenant config: %w", err)
	}
	return dir, nil
}

// gcTenantDirs removes tenant directories whose tenant is gone.
func (c *Core) gcTenantDirs() {
	tenants, err := c.reg.List()
	if err != nil {
		return
	}
	live := map[string]bool{}
	for _, t := range tenants {
		live[strconv.FormatUint(uint64(t.ID), 10)] = true
	}
	for _, sub := range []string{stateTenants, stateAcct} {
		root := filepath.Join(c.cfg.StateDir, sub)
		ents, _ := os.ReadDir(root)
		for _, e := range ents {
			if !live[e.Name()] {
				_ = os.RemoveAll(filepath.Join(root, e.Name()))
			}
		}
	}
}
