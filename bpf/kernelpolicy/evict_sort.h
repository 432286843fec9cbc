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
 * gpuext_evict_sort_by(ctx, c, KEY): order the candidates by ascending KEY,
 * an expression of the candidate `c` (a struct gpuext_chunk_info *), for
 * policies whose key needs more than the chunk (their own maps, the
 * tenant's parameter). Evaluates to GPUEXT_RET_HANDLED, or -1 when the
 * core refused a request.
 *
 * The loops are bounded by the constant only and end on the kfunc's
 * end-of-list answer: comparing against nr_candidates would make the
 * verifier walk every possible length separately.
 */
#define gpuext_evict_sort_by(ctx, c, KEY)                                              \
	({                                                                             \
		int __ret = GPUEXT_RET_HANDLED;                                        \
		__u32 __i, __j;                                                        \
                                                                                       \
		for (__i = 0; __i < GPUEXT_EVICT_MAX_CANDIDATES; __i++) {              \
			struct gpuext_chunk_info __c = {};                             \
			const struct gpuext_chunk_info *c = &__c;                      \
			__u32 __best = __i;                                            \
			__u64 __best_key;                                              \
                                                                                       \
			if (bpf_gpuext_evict_chunk(ctx, __i, &__c))                    \
				break; /* all candidates placed */                     \
			__best_key = (KEY);                                            \
			for (__j = __i + 1; __j < GPUEXT_EVICT_MAX_CANDIDATES; __j++) { \
				__u64 __k;                                             \
                                                                                       \
				if (bpf_gpuext_evict_chunk(ctx, __j, &__c))            \
					break;                                         \
				__k = (KEY);                                           \
				if (__k > __best_key) {                                \
					__best = __j;                                  \
					__best_key = __k;                              \
				}                                                      \
			}                                                              \
			if (bpf_gpuext_evict_move_to_front(ctx, __best)) {             \
				__ret = -1;                                            \
				break;                                                 \
			}                                                              \
		}                                                                      \
		__ret;                                                                 \
	})

/* Order by one of the keys a chunk carries itself. */
static __always_inline int gpuext_evict_sort(struct gpuext_evict_ctx *ctx, enum evict_key key)
{
	return gpuext_evict_sort_by(ctx, c, evict_key_of(c, key));
}

#endif /* GPUEXT_EVICT_SORT_H */
