package admission

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/probe/compile"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/lib/strictjson"
	"github.com/gpuext/gpuext/lib/tenantfs"
	"github.com/gpuext/gpuext/policies"
)

// writeTenantDir writes the tenant's settings.bin, config.json and probes/ directory
// (the compiled probe module, or none when probes is nil).
func (c *Core) writeTenantDir(id bpf.TenantID, key string, p policies.Policy, probes *compile.Bundle, gpus tenantGPUs) (string, error) {
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
	tf := tenantcfg.File{
		ABIVersion: abiVersion, TenantID: uint32(id), TenantKey: key, Policy: p.Name,
		Class: string(p.Priority.Class), QuotaBytes: p.Memory.QuotaBytes, TimesliceUS: p.Priority.TimesliceUS,
		Interleave: p.Priority.Interleave, ActiveWindowUS: p.Priority.ActiveWindowUS, SMPercent: p.Priority.EffectiveSMPercent(), MPSClientPriority: p.Priority.EffectiveMPSClientPriority(), LaunchGate: p.Priority.EffectiveLaunchGate(), Eviction: p.Memory.Eviction.Name, Prefetch: p.Memory.Prefetch.Name,
		Probes: probeNames, ProbeKernels: probeKernels, GPUs: gpus.GPUs, GPUQuotaBytes: gpus.Quotas, GPUMemoryBytes: gpus.Granted,
		QuotaAction: p.Memory.QuotaAction,
	}
	if err := tenantcfg.WriteFiles(dir, tf); err != nil {
		return "", err
	}
	return dir, nil
}

// MaxTenantFile bounds what ReadTenantFile reads of a config.json.
const MaxTenantFile = 64 << 10

// ReadTenantFile reads tenant id's config.json under stateDir (written by
// admission; read without following a link, bounded, strictly decoded).
func ReadTenantFile(stateDir string, id uint64) (tenantcfg.File, error) {
	var tf tenantcfg.File
	d, err := tenantfs.OpenDir(TenantsRoot(stateDir), filepath.Base(TenantDir(stateDir, id)))
	if err != nil {
		return tf, err
	}
	defer d.Close()
	data, err := d.ReadFile(TenantConfigFile, MaxTenantFile)
	if err != nil {
		return tf, err
	}
	if err := strictjson.Decode(data, &tf); err != nil {
		return tf, fmt.Errorf("%s: %w", filepath.Join(d.Path(), TenantConfigFile), err)
	}
	return tf, nil
}
