//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * prefetch_always_max.bpf.c - always-max prefetch: a fault migrates the
 * whole allowed region (the VA block), so a sequential scan faults once per
 * block.  Memory ops "pf_always_max"
 * (tenant config prefetch_policy = GPUEXT_PREFETCH_ALWAYS_MAX).
 */
#include "prefetch_region.h"

SEC("struct_ops/prefetch")
int BPF_PROG(always_max_prefetch, struct gpuext_prefetch_ctx *pctx)
{
	if (bpf_gpuext_prefetch_set_region(pctx, pctx->region_first, pctx->region_last))
		return GPUEXT_RET_DEFAULT;
	return GPUEXT_RET_HANDLED;
}

SEC(".struct_ops.link")
struct gpuext_mem_ops prefetch_always_max_ops = {
	.prefetch = (void *)always_max_prefetch,
	.name = "pf_always_max",
};

char LICENSE[] SEC("license") = "GPL";
