/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/* fx_legacy_nobtf.bpf.c - test fixture: ops in the legacy .struct_ops section, and build.sh strips its BTF. */
#include "gpuext_policy.h"

GPUEXT_POLICY_ABI;

SEC("struct_ops/evict_prepare")
int BPF_PROG(fx_evict, struct gpuext_evict_ctx *ectx)
{
	return GPUEXT_RET_DEFAULT;
}

SEC(".struct_ops") struct gpuext_mem_ops fx_legacy_ops = {
	.evict_prepare = (void *)fx_evict,
};

GPUEXT_LICENSE;
