/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * arrival.bpf.c - a kernel-lab fixture built with the SDK: evicts in
 * arrival order.  The lab swaps it in for an attached two-queue under the
 * same name (policies attach --object arrival.bpf.o --name two-queue
 * --replace) while a workload runs, and checks that no eviction in between
 * ran without a policy.
 */
#include "gpuext_policy.h"

GPUEXT_POLICY_ABI;

SEC("struct_ops/evict_prepare")
int BPF_PROG(arrival_evict_prepare, struct gpuext_evict_ctx *ectx)
{
	__u32 i, j;

	for (i = 0; i < GPUEXT_EVICT_MAX_CANDIDATES; i++) {
		struct gpuext_chunk_info c = {};
		__u32 best = i;
		__u64 best_key;

		if (bpf_gpuext_evict_chunk(ectx, i, &c))
			break;
		best_key = c.alloc_seq;
		for (j = i + 1; j < GPUEXT_EVICT_MAX_CANDIDATES; j++) {
			if (bpf_gpuext_evict_chunk(ectx, j, &c))
				break;
			if (c.alloc_seq > best_key) {
				best = j;
				best_key = c.alloc_seq;
			}
		}
		if (bpf_gpuext_evict_move_to_front(ectx, best))
			return GPUEXT_RET_DEFAULT;
	}
	return GPUEXT_RET_HANDLED;
}

GPUEXT_MEM_OPS(arrival_ops) = {
	.evict_prepare = (void *)arrival_evict_prepare,
};

GPUEXT_LICENSE;
