package admission

import (
	"strconv"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/policies"
)

const abiVersion = bpf.ABIVersion

// The catalog's names for the ABI header's enums (kmod/include/gpuext_abi.h).
// policies validates names; this is the one place they become ABI values.
var (
	priorityIDs = map[policies.PriorityClass]bpf.PriorityClass{
		policies.LatencyCritical: bpf.PriorityLatencyCritical,
		policies.Standard:        bpf.PriorityStandard,
		policies.BestEffort:      bpf.PriorityBestEffort,
	}
	evictionIDs = map[string]bpf.EvictionPolicy{
		"default": bpf.EvictDefault, "lru": bpf.EvictLRU, "fifo": bpf.EvictFIFO, "lfu": bpf.EvictLFU,
		"mru": bpf.EvictMRU, "tenant-quota": bpf.EvictTenantQuota, "priority-weighted": bpf.EvictPriorityWeighted,
		"freq-decay": bpf.EvictFreqDecay,
	}
	prefetchIDs = map[string]bpf.PrefetchPolicy{
		"default": bpf.PrefetchDefault, "none": bpf.PrefetchNone, "always-max": bpf.PrefetchAlwaysMax,
		"tree-threshold": bpf.PrefetchTreeThreshold, "sequential": bpf.PrefetchSequential, "stride": bpf.PrefetchStride,
	}
)

// PriorityClassName is the catalog name of an ABI priority class value.
func PriorityClassName(v uint32) string {
	for name, id := range priorityIDs {
		if uint32(id) == v {
			return string(name)
		}
	}
	return "class-" + strconv.FormatUint(uint64(v), 10)
}

// tenantConfig turns a validated policy into the kernel-facing tenant config
// of the ABI header. The tenant id is filled in by the registry.
func tenantConfig(p policies.Policy, failedOpen bool) bpf.GpuextTenantConfig {
	var cfg bpf.GpuextTenantConfig
	cfg.AbiVersion = abiVersion
	cfg.PriorityClass = uint32(priorityIDs[p.Priority.Class])
	cfg.TimesliceUs = p.Priority.TimesliceUS
	cfg.Interleave = p.Priority.Interleave
	cfg.EvictionPolicy = policyID(evictionIDs, p.Memory.Eviction.Name)
	cfg.PrefetchPolicy = policyID(prefetchIDs, p.Memory.Prefetch.Name)
	cfg.EvictionParam = uint64(firstParam(p.Memory.Eviction.Params))
	cfg.PrefetchParam = uint64(firstParam(p.Memory.Prefetch.Params))
	cfg.QuotaBytes = p.Memory.QuotaBytes
	if cfg.QuotaBytes > 0 {
		cfg.Flags |= uint32(bpf.TenantFlagQuota)
	}
	if failedOpen {
		cfg.Flags |= uint32(bpf.TenantFlagFailOpen)
	}
	return cfg
}

// policyID is the ABI value of an eviction or prefetch algorithm name: the
// enum's for a built-in one, else (a kernel policy directory's, which the
// policy's validation let through) the id the core gives the ops of that
// name (bpf.NamedPolicyID).
func policyID[T ~uint32](builtin map[string]T, name string) uint32 {
	if id, ok := builtin[name]; ok {
		return uint32(id)
	}
	return bpf.NamedPolicyID(bpf.OpsName(name))
}

// firstParam returns the algorithm's parameter (each algorithm has at most one).
func firstParam(params map[string]int64) int64 {
	for _, v := range params {
		if v > 0 {
			return v
		}
	}
	return 0
}
