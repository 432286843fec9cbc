/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/* fx_twomaps.bpf.c - test fixture: two struct_ops maps in one object. */
#include "gpuext_policy.h"

GPUEXT_POLICY_ABI;

SEC("struct_ops/evict_prepare")
int BPF_PROG(fx_evict, struct gpuext_evict_ctx *ectx)
{
	return GPUEXT_RET_DEFAULT;
}

SEC("struct_ops/prefetch")
int BPF_PROG(fx_prefetch, struct gpuext_prefetch_ctx *pctx)
{
	return GPUEXT_RET_DEFAULT;
}

GPUEXT_MEM_OPS(fx_a_ops) = {
	.evict_prepare = (void *)fx_evict,
};

GPUEXT_MEM_OPS(fx_b_ops) = {
	.prefetch = (void *)fx_prefetch,
};

GPUEXT_LICENSE;
