package policies

import (
	"errors"
	"fmt"
)

// PriorityClass orders tenants on a GPU; latency-critical goes first.
type PriorityClass string

const (
	LatencyCritical PriorityClass = "latency-critical"
	Standard        PriorityClass = "standard"
	BestEffort      PriorityClass = "best-effort"
)

// Policy is one named, validated tenant policy: what the catalog holds and
// what selection returns (the "TenantSpec" of the design).
type Policy struct {
	Name        string         `json:"name"`
	Description string         `json:"description,omitempty"`
	Memory      MemoryPolicy   `json:"memory"`
	Priority    PriorityPolicy `json:"priority"`
	Probes      []string       `json:"probes,omitempty"`
	// Requires lists override keys that a request selecting this policy
	// must give (the policy's parameters), e.g. ["quota.gpuext.io"].
	Requires []string `json:"requires,omitempty"`
	// Source says where the policy was loaded from ("builtin:catalog/batch.json"
	// or a file path); set by the catalog loader.
	Source string `json:"-"`
}

// MemoryPolicy is the memory half of a tenant policy.
type MemoryPolicy struct {
	Eviction Algorithm `json:"eviction"`
	Prefetch Algorithm `json:"prefetch"`
	// QuotaBytes is the device-memory quota of the whole tenant; 0 = unlimited.
	QuotaBytes uint64 `json:"-"`
	// Quota is QuotaBytes as written in a catalog file ("8GiB", "512MiB", "0").
	Quota string `json:"quota,omitempty"`
	// QuotaAction is what the agent's memory guard does when the tenant's
	// processes hold more than the quota (plus the driver's context per
	// process) by the driver's own count, as when a process bypasses the
	// device runtime: "kill" stops the process that pushed it over,
	// "report" only logs and counts it. Empty: the node's memoryGuard.action.
	// The admin's choice: no container key overrides it.
	QuotaAction string `json:"quotaAction,omitempty"`
}

// QuotaActions are the values of MemoryPolicy.QuotaAction.
var QuotaActions = []string{"kill", "report"}

// Algorithm names an eviction or prefetch policy with its parameters.
type Algorithm struct {
	Name   string           `json:"name"`
	Params map[string]int64 `json:"params,omitempty"`
}

// PriorityPolicy is the scheduling half of a tenant policy.
type PriorityPolicy struct {
	Class       PriorityClass `json:"class"`
	TimesliceUS uint32        `json:"timesliceUs,omitempty"`
	Interleave  uint32        `json:"interleave,omitempty"`
	// ActiveWindowUS is, for a latency-critical tenant, how long after its
	// last launch it counts as active: the device runtime holds best-effort
	// launches back for that long. It should cover the gap between the
	// tenant's requests. 0: the device runtime's default.
	ActiveWindowUS uint32 `json:"activeWindowUs,omitempty"`
	// SMPercent is, for a best-effort tenant on a GPU shared through an MPS
	// server (host config mps.pipeDirectory), the share of the SMs its
	// contexts may use (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE). The SMs left
	// free are what lets a latency-critical tenant start at once; the shares
	// of the best-effort tenants on one GPU should add up to well under 100.
	// 0: not confined (LaunchGate, when set, is the isolation).
	SMPercent uint32 `json:"smPercent,omitempty"`
	// MPSClientPriority is, for a best-effort tenant on a GPU shared
	// through an MPS server, the MPS client priority of its contexts
	// (CUDA_MPS_CLIENT_PRIORITY): 0 normal, 1 below normal (the GPU
	// dispatches the blocks of normal-priority clients first). A tenant can
	// lower it, never raise it. 0: normal.
	MPSClientPriority uint32 `json:"mpsClientPriority,omitempty"`
	// LaunchGate is, for a best-effort tenant, whether its launches wait
	// while a latency-critical tenant's work is pending (the device
	// runtime's launch gate, for hosts without MPS; under an MPS share the
	// share is the isolation and the gate stands down). Off by default: on
	// the H200 it held the latency-critical tail near its solo figure but
	// left best-effort kernels 0.08 of their throughput, and PyTorch
	// trainers, whose launches run ahead of the GPU, made no progress at
	// all (docs/devrt.md, "The launch gate with real frameworks").
	LaunchGate bool `json:"launchGate,omitempty"`
	// LatencyTarget is, for a latency-critical tenant, the bound on its
	// requests' p99 the agent holds by pacing and sharing out the GPU to
	// best-effort tenants (docs/priority-control.md): "1.5x" (at most 1.5
	// times the tenant's own p99 with no best-effort process on the node)
	// or a duration ("800us", "2ms"). Empty: none.
	LatencyTarget string `json:"latencyTarget,omitempty"`
}

// MaxMPSClientPriority is the lowest MPS client priority CUDA knows
// (CUDA_MPS_CLIENT_PRIORITY=1, below normal).
const MaxMPSClientPriority = 1

// EffectiveMPSClientPriority is the MPS client priority that applies: only
// a best-effort tenant is lowered.
func (p PriorityPolicy) EffectiveMPSClientPriority() uint32 {
	if p.Class != BestEffort {
		return 0
	}
	return p.MPSClientPriority
}

// EffectiveLaunchGate is whether the launch gate applies: only a
// best-effort tenant waits (an override that changes the class drops it).
func (p PriorityPolicy) EffectiveLaunchGate() bool {
	return p.Class == BestEffort && p.LaunchGate
}

// EffectiveSMPercent is the SM share that applies: only a best-effort
// tenant is confined (an override that changes the class drops it).
func (p PriorityPolicy) EffectiveSMPercent() uint32 {
	if p.Class != BestEffort {
		return 0
	}
	return p.SMPercent
}

// Request is what selection reads: the container's identity and its keyed
// metadata. Container keys override pod keys.
type Request struct {
	ContainerName  string
	PodName        string
	PodNamespace   string
	Labels         map[string]string // container labels (Docker labels land here)
	Annotations    map[string]string // container annotations
	PodLabels      map[string]string
	PodAnnotations map[string]string
}

// KeyError is a bad request: it names the key and the value that were wrong.
type KeyError struct {
	Key   string
	Value string
	Err   error
}

func (e *KeyError) Error() string {
	if e.Value == "" && errors.Is(e.Err, ErrMissingParam) {
		return fmt.Sprintf("%s: %v", keyText(e.Key), e.Err) // the key is absent: no value to show
	}
	return fmt.Sprintf("%s=%s: %v", keyText(e.Key), quote(e.Value), e.Err)
}

func (e *KeyError) Unwrap() error { return e.Err }
