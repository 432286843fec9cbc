//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * rogue_prefetch.bpf.c - a test-only prefetch policy that asks for a region
 * past the end of the VA block: the core must refuse it, count it, and the
 * driver must apply its stock region.  It takes the "pf_tree" slot
 * (GPUEXT_PREFETCH_TREE_THRESHOLD) so a tenant can name it; the catalog's
 * tree-threshold policy must not be attached at the same time.
 */
#include "prefetch_region.h"

SEC("struct_ops/prefetch")
int BPF_PROG(rogue_prefetch, struct gpuext_prefetch_ctx *pctx)
{
	bpf_gpuext_prefetch_set_region(pctx, pctx->fault_page, pctx->region_last + 64);
	return GPUEXT_RET_HANDLED;
}

SEC(".struct_ops.link")
struct gpuext_mem_ops rogue_prefetch_ops = {
	.prefetch = (void *)rogue_prefetch,
	.name = "pf_tree",
};

char LICENSE[] SEC("license") = "GPL";
