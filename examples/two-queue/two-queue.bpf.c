/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * two-queue.bpf.c - a 2Q-style eviction policy, built with the gpuext SDK
 * (docs/write-a-policy.md); not one of the built-in policies.
 *
 * Chunks accessed fewer than `hot-accesses` times while resident (the
 * tenant's eviction_param, default 2) sit in the probation queue and leave
 * first, oldest arrival first: a one-pass scan cannot push out the working
 * set.  The others sit in the protected queue and leave after them, least
 * recently used first.
 *
 * The count is the candidate's access_count, which includes the access that
 * faulted the chunk in (gpuext_abi.h): a chunk that arrived by a fault has
 * 1 already, so the default 2 protects a chunk once it is used again, as
 * 2Q promotes on a second reference.  At 1 only chunks that arrived without
 * an access (migrated ahead of a fault; gpusim's alloc) are on probation.
 */
#include "gpuext_policy.h"

GPUEXT_POLICY_ABI;

#define HOT_DEFAULT 2 /* the fault that brought it in, and one more */
#define PROTECTED (1ULL << 63)

/* The eviction key of a chunk: probation by arrival, then protected by last access. */
static __always_inline __u64 twoq_key(const struct gpuext_chunk_info *c, __u64 hot)
{
	if (c->access_count < hot)
		return c->alloc_seq & ~PROTECTED;
	return PROTECTED | (c->access_seq & ~PROTECTED);
}

SEC("struct_ops/evict_prepare")
int BPF_PROG(twoq_evict_prepare, struct gpuext_evict_ctx *ectx)
{
	__u64 hot = bpf_gpuext_evict_param(ectx);
	__u32 i, j;

	if (!hot)
		hot = HOT_DEFAULT;
	/*
	 * Selection sort through the request kfuncs: each round moves the
	 * largest remaining key to the front, so after n rounds the smallest
	 * key leads.  Loops are bounded by the constant and end on the
	 * kfunc's end-of-list answer.
	 */
	for (i = 0; i < GPUEXT_EVICT_MAX_CANDIDATES; i++) {
		struct gpuext_chunk_info c = {};
		__u32 best = i;
		__u64 best_key;

		if (bpf_gpuext_evict_chunk(ectx, i, &c))
			break;
		best_key = twoq_key(&c, hot);
		for (j = i + 1; j < GPUEXT_EVICT_MAX_CANDIDATES; j++) {
			__u64 k;

			if (bpf_gpuext_evict_chunk(ectx, j, &c))
				break;
			k = twoq_key(&c, hot);
			if (k > best_key) {
				best = j;
				best_key = k;
			}
		}
		if (bpf_gpuext_evict_move_to_front(ectx, best))
			return GPUEXT_RET_DEFAULT;
	}
	return GPUEXT_RET_HANDLED;
}

GPUEXT_MEM_OPS(two_queue_ops) = {
	.evict_prepare = (void *)twoq_evict_prepare,
};

GPUEXT_LICENSE;
