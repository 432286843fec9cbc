package tenantcfg

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gpuext/gpuext/lib/atomicfile"
	"github.com/gpuext/gpuext/policies"
)

// ConfigFileName is the tenant's human-readable config in the tenant
// directory, beside settings.bin (FileName).
const ConfigFileName = "config.json"

// File is a tenant's config.json: the human-readable view of the
// tenant, for people and tools (docs/injection.md). The device runtime does
// not read it: it reads settings.bin, which Settings derives from the same
// File (WriteFiles writes both).
type File struct {
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

// classes are the catalog's class names as the device runtime's classes,
// numbered as the kernel ABI numbers them (kmod/include/gpuext_prio.h, one
// header for both sides: internal/admission's TestOneClassNumbering).
var classes = map[policies.PriorityClass]Class{
	policies.LatencyCritical: ClassLatencyCritical,
	policies.Standard:        ClassStandard,
	policies.BestEffort:      ClassBestEffort,
}

// Name is the catalog name of a device-runtime class (ClassOf's inverse;
// "class-N" for a number no class has).
func (c Class) Name() policies.PriorityClass {
	for name, id := range classes {
		if id == c {
			return name
		}
	}
	return policies.PriorityClass(fmt.Sprintf("class-%d", uint32(c)))
}

// ClassOf is a catalog class name as the device runtime's class. policies
// validates the names; an unknown one is standard, as the device runtime
// always treated it.
func ClassOf(name policies.PriorityClass) Class {
	if c, ok := classes[name]; ok {
		return c
	}
	return ClassStandard
}

// Settings is the device runtime's view of the tenant (settings.bin). Every
// default is resolved here, so the interposer takes each value as it is:
// the latency-critical window is activeWindowUs, else
// DefaultActiveWindow. It is never the driver timeslice
// (timesliceUs): that is how long the GPU runs one context before the next,
// a different thing from how long after a launch the tenant counts as busy
// (an earlier reader took one for the other).
func (tf File) Settings() Settings {
	window := DefaultActiveWindow
	if us := tf.ActiveWindowUS; us > 0 {
		window = time.Duration(us) * time.Microsecond
	}
	return Settings{
		TenantID:     uint64(tf.TenantID),
		QuotaBytes:   tf.QuotaBytes,
		ActiveWindow: window,
		Class:        ClassOf(policies.PriorityClass(tf.Class)),
		SMPercent:    tf.SMPercent,
		// the catalog bounds it; a hand-written config.json above the
		// lowest is the lowest, not a file the interposer would ignore
		MPSClientPriority: min(tf.MPSClientPriority, MaxMPSClientPriority),
		LaunchGate:        tf.LaunchGate, // the interposer gates best-effort processes only
		DeviceQuotas:      tf.GPUQuotaBytes,
		LatencyTarget:     tf.latencyTarget(),
		HostGPUs:          hostGPUMask(tf.GPUs),
	}
}

// hostGPUMask is the settings' bit set of host GPU indices; 0 (not known,
// every GPU) when there are none or one is past what the 32 bits hold.
func hostGPUMask(gpus []int) uint32 {
	var m uint32
	for _, g := range gpus {
		if g < 0 || g >= 32 {
			return 0
		}
		m |= 1 << g
	}
	return m
}

// latencyTarget is the settings' form of LatencyTarget: none unless the
// tenant is latency-critical and the target parses (policies validated it;
// a hand-written config.json with a bad one has none rather than a file the
// host's readers refuse).
func (tf File) latencyTarget() LatencyTarget {
	if tf.LatencyTarget == "" || policies.PriorityClass(tf.Class) != policies.LatencyCritical {
		return LatencyTarget{}
	}
	ratio, p99, err := policies.ParseLatencyTarget(tf.LatencyTarget)
	if err != nil {
		return LatencyTarget{}
	}
	return LatencyTarget{P99: p99, RatioMilli: ratio}
}

// WriteFiles writes tf into the tenant dir: settings.bin, what the
// device runtime reads, then config.json; each atomically (temp file +
// rename: a running process sees the old file or the new one) and neither
// when its bytes are unchanged (a second container of the tenant, a
// re-admission), so running processes do not re-read it.
func WriteFiles(dir string, tf File) error {
	bin, err := Encode(tf.Settings())
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
	}{{FileName, bin}, {ConfigFileName, js}} {
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
