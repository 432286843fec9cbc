/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/* fx_noabi.bpf.c - test fixture: built without GPUEXT_POLICY_ABI. */
#include "gpuext_policy.h"

SEC("struct_ops/evict_prepare")
int BPF_PROG(fx_evict, struct gpuext_evict_ctx *ectx)
{
	return GPUEXT_RET_DEFAULT;
}

GPUEXT_MEM_OPS(fx_noabi_ops) = {
	.evict_prepare = (void *)fx_evict,
};

GPUEXT_LICENSE;
