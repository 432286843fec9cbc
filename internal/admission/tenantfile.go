package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/probe/compile"
	"github.com/gpuext/gpuext/internal/atomicfile"
	"github.com/gpuext/gpuext/policies"
)

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
