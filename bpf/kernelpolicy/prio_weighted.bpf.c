//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * prio_weighted.bpf.c - priority-weighted eviction.  As the system ops
 * (debugfs gpuext/system = "prio_weighted") it arbitrates a full device:
 * each context's resident memory counts its tenant's weight times more for
 * each priority class below latency-critical, and the context with the
 * largest weighted share gives up the chunk (ties: least recently used).
 * So with one weight W for all, a class keeps W times as much memory as the
 * class below it before it is asked first.  The weight is per tenant: its
 * eviction_param (the catalog's priority-weighted "weight", 1..100), or
 * PRIO_WEIGHT when the tenant has none (not registered, or another
 * eviction policy).  Within a context, chunks leave in LRU order.
 * Memory ops "prio_weighted"
 * (tenant config eviction_policy = GPUEXT_EVICT_PRIORITY_WEIGHTED).
 */
#include "evict_sort.h"

#define PRIO_WEIGHT 4       /* the catalog's default weight */
#define PRIO_MAX_WEIGHT 100 /* the catalog's bound */

SEC("struct_ops/evict_arbitrate")
int BPF_PROG(prio_weighted_arbitrate, struct gpuext_arbitrate_ctx *actx)
{
	__u64 best_score = 0, best_seq = 0;
	__u32 i, best = 0;
	int found = 0;

	/* Bounded by the constant; ends on the kfunc's end-of-list answer. */
	for (i = 0; i < GPUEXT_EVICT_MAX_CANDIDATES; i++) {
		struct gpuext_evict_owner o = {};
		__u64 score, w;

		if (bpf_gpuext_arbitrate_owner(actx, i, &o))
			break;
		w = bpf_gpuext_arbitrate_param(actx, i);
		if (!w)
			w = PRIO_WEIGHT;
		if (w > PRIO_MAX_WEIGHT)
			w = PRIO_MAX_WEIGHT;
		score = o.resident_bytes >> 12; /* pages */
		if (o.priority_class >= GPUEXT_PRIO_STANDARD)
			score *= w;
		if (o.priority_class >= GPUEXT_PRIO_BEST_EFFORT)
			score *= w;
		if (!found || score > best_score || (score == best_score && o.access_seq < best_seq)) {
			found = 1;
			best = i;
			best_score = score;
			best_seq = o.access_seq;
		}
	}
	if (!found || bpf_gpuext_arbitrate_pick(actx, best))
		return GPUEXT_RET_DEFAULT;
	return GPUEXT_RET_HANDLED;
}

SEC("struct_ops/evict_prepare")
int BPF_PROG(prio_weighted_evict_prepare, struct gpuext_evict_ctx *ectx)
{
	return gpuext_evict_sort(ectx, EVICT_KEY_ACCESS);
}

SEC(".struct_ops.link")
struct gpuext_mem_ops prio_weighted_ops = {
	.evict_prepare = (void *)prio_weighted_evict_prepare,
	.evict_arbitrate = (void *)prio_weighted_arbitrate,
	.name = "prio_weighted",
};

char LICENSE[] SEC("license") = "GPL";
