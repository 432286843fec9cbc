// SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0)
//go:build ignore

/*
 * registry.bpf.c - the tenant registry maps, for bpf2go.
 *
 * This object has no programs.  It exists so bpf2go generates the Go map
 * specs of the registry (registry_maps.h) and the Go types of the ABI
 * header (kmod/include/gpuext_abi.h) from one compiled source.
 */
#include "registry_maps.h"

/*
 * The header's #define constants do not reach BTF; this enum carries the
 * ones the Go side needs, with values taken from the header by the compiler.
 */
enum gpuext_abi_constants {
	GPUEXT_ABI_CONST_ABI_VERSION = GPUEXT_ABI_VERSION,
	GPUEXT_ABI_CONST_KEY_LEN = GPUEXT_KEY_LEN,
	GPUEXT_ABI_CONST_NAME_LEN = GPUEXT_NAME_LEN,
	GPUEXT_ABI_CONST_MAX_PROBES = GPUEXT_MAX_PROBES,
	GPUEXT_ABI_CONST_MAX_TENANTS = GPUEXT_MAX_TENANTS,
	GPUEXT_ABI_CONST_MAX_CGROUPS = GPUEXT_MAX_CGROUPS,
	GPUEXT_ABI_CONST_POLICY_NAMED = GPUEXT_POLICY_NAMED,
	GPUEXT_ABI_CONST_FNV32_OFFSET = GPUEXT_FNV32_OFFSET,
	GPUEXT_ABI_CONST_FNV32_PRIME = GPUEXT_FNV32_PRIME,
	GPUEXT_ABI_CONST_OPS_NAME_LEN = GPUEXT_OPS_NAME_LEN,
};

/*
 * Enums are emitted to BTF only when something refers to them; these
 * never-initialised pointers do, so bpf2go -type can turn them into Go
 * constants.  Nothing reads them.
 */
const enum gpuext_abi_constants *gpuext_unused_abi_constants __attribute__((unused));
const enum gpuext_priority_class *gpuext_unused_priority_class __attribute__((unused));
const enum gpuext_eviction_policy *gpuext_unused_eviction_policy __attribute__((unused));
const enum gpuext_prefetch_policy *gpuext_unused_prefetch_policy __attribute__((unused));
const enum gpuext_tenant_flags *gpuext_unused_tenant_flags __attribute__((unused));

char LICENSE[] SEC("license") = "Dual BSD/GPL";
