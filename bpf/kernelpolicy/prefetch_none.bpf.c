//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * prefetch_none.bpf.c - no prefetch: a fault migrates the faulting page
 * only, so faults equal the distinct pages touched.  Memory ops "pf_none"
 * (tenant config prefetch_policy = GPUEXT_PREFETCH_NONE).
 */
#include "prefetch_region.h"

SEC("struct_ops/prefetch")
int BPF_PROG(none_prefetch, struct gpuext_prefetch_ctx *pctx)
{
	if (bpf_gpuext_prefetch_set_region(pctx, pctx->fault_page, pctx->fault_page))
		return GPUEXT_RET_DEFAULT;
	return GPUEXT_RET_HANDLED;
}

SEC(".struct_ops.link")
struct gpuext_mem_ops prefetch_none_ops = {
	.prefetch = (void *)none_prefetch,
	.name = "pf_none",
};

char LICENSE[] SEC("license") = "GPL";
