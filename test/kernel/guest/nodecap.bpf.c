//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * nodecap.bpf.c - a test-only prefetch_node policy: it takes a node of the
 * prefetch tree when more than a quarter of it is resident or faulting
 * (the stock rule wants more than half), and never a node larger than
 * NODECAP_MAX_PAGES.  Ops "nodecap", named by its GPUEXT_POLICY_NAMED id.
 */
#include "gpuext_policy.h"

#define NODECAP_MAX_PAGES 64

SEC("struct_ops/prefetch_node")
int BPF_PROG(nodecap_node, struct gpuext_prefetch_node_ctx *nctx)
{
	__u32 size = nctx->node_last - nctx->node_first + 1;
	__u32 take = size <= NODECAP_MAX_PAGES && nctx->counter * 4 > size;

	if (bpf_gpuext_prefetch_node_take(nctx, take))
		return GPUEXT_RET_DEFAULT;
	return GPUEXT_RET_HANDLED;
}

GPUEXT_MEM_OPS(nodecap_ops) = {
	.prefetch_node = (void *)nodecap_node,
	.name = "nodecap",
};

GPUEXT_LICENSE;
