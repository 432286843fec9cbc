package bpf

import (
	"strings"
)

// Ids of memory policies that the enums of the ABI header do not name
// (kernel policy directory policies, see docs/write-a-policy.md).
const (
	// PolicyNamed is GPUEXT_POLICY_NAMED: the bit of an eviction_policy or
	// prefetch_policy value that names an attached memory ops by NamedPolicyID.
	PolicyNamed = uint32(registryGpuextAbiConstantsGPUEXT_ABI_CONST_POLICY_NAMED)
	// MaxOpsNameLen is the longest ops name (GPUEXT_OPS_NAME_LEN less its NUL).
	MaxOpsNameLen = int(registryGpuextAbiConstantsGPUEXT_ABI_CONST_OPS_NAME_LEN) - 1

	fnv32Offset = uint32(registryGpuextAbiConstantsGPUEXT_ABI_CONST_FNV32OFFSET)
	fnv32Prime  = uint32(registryGpuextAbiConstantsGPUEXT_ABI_CONST_FNV32PRIME)
)

// NamedPolicyID is the id a tenant config's eviction_policy or
// prefetch_policy holds to select the attached memory ops named ops: the
// core computes the same id for every memory ops it attaches.
func NamedPolicyID(ops string) uint32 {
	h := fnv32Offset
	for i := 0; i < len(ops); i++ {
		h ^= uint32(ops[i])
		h *= fnv32Prime
	}
	return PolicyNamed | h&^PolicyNamed
}

// OpsName is the kernel ops name of a policy name of the catalog's
// grammar: "two-queue" is ops "two_queue" (the core takes [a-z0-9_]).
func OpsName(name string) string { return strings.ReplaceAll(name, "-", "_") }
