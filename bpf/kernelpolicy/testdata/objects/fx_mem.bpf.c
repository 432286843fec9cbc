/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/* fx_mem.bpf.c - test fixture: a valid SDK memory policy with evict_prepare only. */
#include "gpuext_policy.h"

GPUEXT_POLICY_ABI;

SEC("struct_ops/evict_prepare")
int BPF_PROG(fx_evict, struct gpuext_evict_ctx *ectx)
{
	return GPUEXT_RET_DEFAULT;
}

GPUEXT_MEM_OPS(fx_mem_ops) = {
	.evict_prepare = (void *)fx_evict,
};

GPUEXT_LICENSE;
