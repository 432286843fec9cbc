/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * evict_sort.h - the request loop shared by the ordering eviction policies.
 *
 * A policy picks a key per candidate; gpuext_evict_sort() asks the core to
 * order the candidates by ascending key (smallest evicted first) using only
 * the request kfuncs: read candidate j, move candidate j to the front.
 * Each round moves the largest remaining key to the front, so after n
 * rounds the smallest key leads.
 */
#ifndef GPUEXT_EVICT_SORT_H
#define GPUEXT_EVICT_SORT_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "gpuext_ops.h"
#include "gpuext_kfuncs.h"


enum evict_key {
	EVICT_KEY_ALLOC,  /* arrival order: FIFO */
	EVICT_KEY_ACCESS, /* last access: LRU */
	EVICT_KEY_FREQ,   /* fewest accesses, then last access: LFU */
	EVICT_KEY_RECENT, /* most recent access first: MRU */
};

/* Low bits of the LFU key: the access clock, so equal counts go LRU. */
#define EVICT_FREQ_SEQ_BITS 40

static __always_inline __u64 evict_key_of(const struct gpuext_chunk_info *c, enum evict_key key)
{
	switch (key) {
	case EVICT_KEY_ALLOC:
		return c->alloc_seq;
	case EVICT_KEY_FREQ:
		return (c->access_count << EVICT_FREQ_SEQ_BITS) |
		       (c->access_seq & ((1ULL << EVICT_FREQ_SEQ_BITS) - 1));
	case EVICT_KEY_RECENT:
		return ~c->access_seq;
	default:
		return c->access_seq;
	}
}

/*
 * The loops are bounded by the constant only and end on the kfunc's
 * end-of-list answer: comparing against nr_candidates would make the
 * verifier walk every possible length separately.
 */
static __always_inline int gpuext_evict_sort(struct gpuext_evict_ctx *ctx, enum evict_key key)
{
	__u32 i, j;

	for (i = 0; i < GPUEXT_EVICT_MAX_CANDIDATES; i++) {
		struct gpuext_chunk_info c = {};
		__u32 best = i;
		__u64 best_key;

		if (bpf_gpuext_evict_chunk(ctx, i, &c))
			break; /* all candidates placed */
		best_key = evict_key_of(&c, key);
		for (j = i + 1; j < GPUEXT_EVICT_MAX_CANDIDATES; j++) {
			__u64 k;

			if (bpf_gpuext_evict_chunk(ctx, j, &c))
				break;
			k = evict_key_of(&c, key);
			if (k > best_key) {
				best = j;
				best_key = k;
			}
		}
		if (bpf_gpuext_evict_move_to_front(ctx, best))
			return -1;
	}
	return GPUEXT_RET_HANDLED;
}

#endif /* GPUEXT_EVICT_SORT_H */
