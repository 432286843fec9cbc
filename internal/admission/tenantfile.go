package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/gpubpf/compile"
	"github.com/gpuext/gpuext/internal/atomicfile"
	"github.com/gpuext/gpuext/internal/strictjson"
	"github.com/gpuext/gpuext/internal/tenantfs"
	"github.com/gpuext/gpuext/policies"
)

// TenantFile is a tenant's config.json: the human-readable view of the
// tenant, for people and tools (docs/injection.md). The device runtime does
// not read it: it reads settings.bin, which Settings derives from the same
// TenantFile (WriteTenantFiles writes both).
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
	SMPercent uint32 `json:"smPercent"`
	// MPSClientPriority: a best-effort tenant's MPS client priority
	// (CUDA_MPS_CLIENT_PRIORITY; 0 normal, 1 below normal).
	MPSClientPriority uint32 `json:"mpsClientPriority"`
	// LaunchGate: a best-effort tenant's launches wait on latency-critical
	// work (the device runtime's launch gate); off unless its policy says.
	LaunchGate bool     `json:"launchGate"`
	Eviction   string   `json:"eviction"`
	Prefetch   string   `json:"prefetch"`
	Probes     []string `json:"probes"`
	// ProbeKernels: the kernels (.entry names) the probes are limited to,
	// as the kernel lines of probes/module.conf: the container's
	// probe-kernels.gpuext.io narrowed by the probes' catalog kernels.
	// Empty: every kernel (or no probes).
	ProbeKernels []string `json:"probeKernels"`
	// GPUs and GPUQuotaBytes: for a container given GPU memory by the
	// scheduler (gpuext.io/gpu-memory), the host GPU index and the quota of
	// each device ordinal the container sees; the quota applies per GPU.
	// Empty: QuotaBytes applies on every GPU.
	GPUs          []int    `json:"gpus,omitempty"`
	GPUQuotaBytes []uint64 `json:"gpuQuotaBytes,omitempty"`
	// GPUMemoryBytes: what the scheduler gave on each of GPUs, the
	// ceiling of GPUQuotaBytes; a policy change keeps it.
	GPUMemoryBytes []uint64 `json:"gpuMemoryBytes,omitempty"`
	// QuotaAction: what the agent's memory guard does when the tenant holds
	// more than its quota by the driver's count (the policy's
	// memory.quotaAction; empty: the node's memoryGuard.action).
	QuotaAction string `json:"quotaAction,omitempty"`
	// LatencyTarget: a latency-critical tenant's latency target (the
	// policy's priority.latencyTarget, as written there), which the agent's
	// latency controller holds. Empty: none.
	LatencyTarget string `json:"latencyTarget,omitempty"`
}

// devrtClass is a catalog class name as the device runtime's class: the
// kernel ABI's number (priorityIDs), since both sides number the classes
// from one header (kmod/include/gpuext_prio.h; TestOneClassNumbering).
// policies validates the names; an unknown one is standard, as the device
// runtime always treated it.
func devrtClass(name policies.PriorityClass) tenantcfg.Class {
	id, ok := priorityIDs[name]
	if !ok {
		return tenantcfg.ClassStandard
	}
	return tenantcfg.Class(id)
}

// Settings is the device runtime's view of the tenant (settings.bin). Every
// default is resolved here, so the interposer takes each value as it is:
// the latency-critical window is activeWindowUs, else
// tenantcfg.DefaultActiveWindow. It is never the driver timeslice
// (timesliceUs): that is how long the GPU runs one context before the next,
// a different thing from how long after a launch the tenant counts as busy
// (an earlier reader took one for the other).
func (tf TenantFile) Settings() tenantcfg.Settings {
	window := tenantcfg.DefaultActiveWindow
	if us := tf.ActiveWindowUS; us > 0 {
		window = time.Duration(us) * time.Microsecond
	}
	return tenantcfg.Settings{
		TenantID:     uint64(tf.TenantID),
		QuotaBytes:   tf.QuotaBytes,
		ActiveWindow: window,
		Class:        devrtClass(policies.PriorityClass(tf.Class)),
		SMPercent:    tf.SMPercent,
		// the catalog bounds it; a hand-written config.json above the
		// lowest is the lowest, not a file the interposer would ignore
		MPSClientPriority: min(tf.MPSClientPriority, tenantcfg.MaxMPSClientPriority),
		LaunchGate:        tf.LaunchGate, // the interposer gates best-effort processes only
		DeviceQuotas:      tf.GPUQuotaBytes,
		LatencyTarget:     tf.latencyTarget(),
	}
}

// latencyTarget is the settings' form of LatencyTarget: none unless the
// tenant is latency-critical and the target parses (policies validated it;
// a hand-written config.json with a bad one has none rather than a file the
// host's readers refuse).
func (tf TenantFile) latencyTarget() tenantcfg.LatencyTarget {
	if tf.LatencyTarget == "" || policies.PriorityClass(tf.Class) != policies.LatencyCritical {
		return tenantcfg.LatencyTarget{}
	}
	ratio, p99, err := policies.ParseLatencyTarget(tf.LatencyTarget)
	if err != nil {
		return tenantcfg.LatencyTarget{}
	}
	return tenantcfg.LatencyTarget{P99: p99, RatioMilli: ratio}
}

// WriteTenantFiles writes tf into the tenant dir: settings.bin, what the
// device runtime reads, then config.json; each atomically (temp file +
// rename: a running process sees the old file or the new one) and neither
// when its bytes are unchanged (a second container of the tenant, a
// re-admission), so running processes do not re-read it.
func WriteTenantFiles(dir string, tf TenantFile) error {
	bin, err := tenantcfg.Encode(tf.Settings())
	if err != nil {
		return fmt.Errorf("tenant settings: %w", err)
	}
	js, err := json.MarshalIndent(tf, "", "  ")
	if err != nil {
		return fmt.Errorf("tenant config: %w", err)
	}
	js = append(js, '\n')
	for _, f := range []struct {
		name string
		data []byte
	}{{TenantSettingsFile, bin}, {TenantConfigFile, js}} {
		path := filepath.Join(dir, f.name)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, f.data) {
			continue
		}
		if err := atomicfile.Write(path, f.data, 0o644); err != nil {
			return fmt.Errorf("tenant %s: %w", f.name, err)
		}
	}
	return nil
}

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
	tf := TenantFile{
		ABIVersion: abiVersion, TenantID: uint32(id), TenantKey: key, Policy: p.Name,
		Class: string(p.Priority.Class), QuotaBytes: p.Memory.QuotaBytes, TimesliceUS: p.Priority.TimesliceUS,
		Interleave: p.Priority.Interleave, ActiveWindowUS: p.Priority.ActiveWindowUS, SMPercent: p.Priority.EffectiveSMPercent(), MPSClientPriority: p.Priority.EffectiveMPSClientPriority(), LaunchGate: p.Priority.EffectiveLaunchGate(), Eviction: p.Memory.Eviction.Name, Prefetch: p.Memory.Prefetch.Name,
		Probes: probeNames, ProbeKernels: probeKernels, GPUs: gpus.GPUs, GPUQuotaBytes: gpus.Quotas, GPUMemoryBytes: gpus.Granted,
		QuotaAction: p.Memory.QuotaAction, LatencyTarget: latencyTargetOf(p.Priority),
	}
	if err := WriteTenantFiles(dir, tf); err != nil {
		return "", err
	}
	return dir, nil
}

// latencyTargetOf is the policy's latency target where it applies (a
// latency-critical tenant; an override that changes the class drops it).
func latencyTargetOf(p policies.PriorityPolicy) string {
	if p.Class != policies.LatencyCritical {
		return ""
	}
	return p.LatencyTarget
}

// MaxTenantFile bounds what ReadTenantFile reads of a config.json.
const MaxTenantFile = 64 << 10

// ReadTenantFile reads tenant id's config.json under stateDir (written by
// admission; read without following a link, bounded, strictly decoded).
func ReadTenantFile(stateDir string, id uint64) (TenantFile, error) {
	var tf TenantFile
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
