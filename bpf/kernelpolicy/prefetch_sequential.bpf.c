//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * prefetch_sequential.bpf.c - sequential prefetch: a fault migrates the
 * faulting page and the pages after it, `pages` in all (the tenant config's
 * prefetch_param, default 32), clipped to the VA block.  A sequential scan
 * then faults once per `pages` pages.  Memory ops "pf_sequential"
 * (tenant config prefetch_policy = GPUEXT_PREFETCH_SEQUENTIAL).
 */
#include "prefetch_region.h"

#define SEQUENTIAL_DEFAULT_PAGES 32
#define SEQUENTIAL_MAX_PAGES 512

SEC("struct_ops/prefetch")
int BPF_PROG(sequential_prefetch, struct gpuext_prefetch_ctx *pctx)
{
	__u64 pages = bpf_gpuext_prefetch_param(pctx);
	__u32 f = pctx->fault_page, last;

	if (!pages)
		pages = SEQUENTIAL_DEFAULT_PAGES;
	if (pages > SEQUENTIAL_MAX_PAGES)
		pages = SEQUENTIAL_MAX_PAGES;
	last = f + (__u32)pages - 1;
	if (last > pctx->region_last || last < f)
		last = pctx->region_last;
	if (bpf_gpuext_prefetch_set_region(pctx, f, last))
		return GPUEXT_RET_DEFAULT;
	return GPUEXT_RET_HANDLED;
}

SEC(".struct_ops.link")
struct gpuext_mem_ops prefetch_sequential_ops = {
	.prefetch = (void *)sequential_prefetch,
	.name = "pf_sequential",
};

char LICENSE[] SEC("license") = "GPL";
