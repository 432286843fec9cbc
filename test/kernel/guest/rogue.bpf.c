//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * rogue.bpf.c - a test-only policy that asks for a chunk that does not
 * exist: the core must refuse the request, count it, and keep the stock
 * order.  It takes the "mru" slot (GPUEXT_EVICT_MRU) so a tenant can name it.
 */
#include "evict_sort.h"

SEC("struct_ops/evict_prepare")
int BPF_PROG(rogue_evict_prepare, struct gpuext_evict_ctx *ectx)
{
	/* A legal request first, then one past the end. */
	bpf_gpuext_evict_move_to_front(ectx, 0);
	bpf_gpuext_evict_move_to_front(ectx, ectx->nr_candidates + 5);
	return GPUEXT_RET_HANDLED;
}

SEC(".struct_ops.link")
struct gpuext_mem_ops rogue_ops = {
	.evict_prepare = (void *)rogue_evict_prepare,
	.name = "mru",
};

char LICENSE[] SEC("license") = "GPL";
