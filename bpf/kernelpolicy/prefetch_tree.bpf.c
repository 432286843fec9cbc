//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * prefetch_tree.bpf.c - tree-threshold prefetch with the threshold as the
 * tenant's parameter (prefetch_param, percent, default 51: the driver's
 * stock rule).  Over the aligned regions of 2, 4, ... pages around the
 * fault, inside the allowed region, take the largest one in which the
 * resident pages plus the faulting one exceed the threshold.  Memory ops
 * "pf_tree" (tenant config prefetch_policy = GPUEXT_PREFETCH_TREE_THRESHOLD).
 */
#include "prefetch_region.h"

#define TREE_DEFAULT_THRESHOLD 51
#define TREE_LEVELS 9 /* regions of 2 .. 512 pages */

SEC("struct_ops/prefetch")
int BPF_PROG(tree_prefetch, struct gpuext_prefetch_ctx *pctx)
{
	__u64 threshold = bpf_gpuext_prefetch_param(pctx);
	__u32 f = pctx->fault_page, first = f, last = f;
	__u32 level;

	if (!threshold || threshold > 100)
		threshold = TREE_DEFAULT_THRESHOLD;
	for (level = 1; level <= TREE_LEVELS; level++) {
		__u32 size = 1U << level;
		__u32 lo = f & ~(size - 1), hi = lo + size - 1;
		int n;

		if (lo < pctx->region_first || hi > pctx->region_last)
			break;
		n = bpf_gpuext_prefetch_resident(pctx, lo, hi);
		if (n < 0)
			return GPUEXT_RET_DEFAULT; /* no residency: the driver's own rule */
		if ((__u64)(n + 1) * 100 > threshold * size) {
			first = lo;
			last = hi;
		}
	}
	if (bpf_gpuext_prefetch_set_region(pctx, first, last))
		return GPUEXT_RET_DEFAULT;
	return GPUEXT_RET_HANDLED;
}

SEC(".struct_ops.link")
struct gpuext_mem_ops prefetch_tree_ops = {
	.prefetch = (void *)tree_prefetch,
	.name = "pf_tree",
};

char LICENSE[] SEC("license") = "GPL";
