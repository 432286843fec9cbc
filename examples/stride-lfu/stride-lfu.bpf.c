/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * stride-lfu.bpf.c - the prefetch and eviction pair behind gpu_ext's
 * llama.cpp result, ported by hand to gpuext's request/validate ops with the
 * gpuext SDK (docs/write-a-policy.md, docs/gpu-ext-mapping.md); not one of
 * the built-in policies.  One ops serves as both the tenant's prefetch and
 * its eviction policy.
 *
 * Prefetch (their prefetch_stride): per VA block, the distance between
 * successive faults is the stride candidate.  The same stride again raises
 * a confidence, another one (or one longer than STRIDE_MAX pages) lowers it
 * by one, never below 0, instead of starting over.  Once the confidence
 * reaches STRIDE_CONFIDENCE, a fault prefetches `pages` pages (the tenant's
 * prefetch_param, default 2) at the predicted next fault, fault + stride,
 * in the stride's direction.  The core takes one contiguous region that
 * holds the faulting page, so the region runs from the faulting page to
 * the last predicted page: for a stride of one page that is exactly their
 * region; for a longer stride it also brings in the pages between (theirs
 * does not), see docs/gpu-ext-mapping.md.
 *
 * Eviction (their eviction_lfu): their driver list, kept in our own map.  A
 * chunk that becomes resident goes to the head (it leaves first, the newest
 * before older ones); each touch below LFU_MAX moves it to the tail; at
 * LFU_MAX touches it stays where it is.  evict_prepare orders the
 * candidates by that list position.
 */
#include "gpuext_policy.h"

GPUEXT_POLICY_ABI;

#define STRIDE_CONFIDENCE 2 /* their confidence_threshold default */
#define STRIDE_MAX 128      /* their max_stride default, pages */
#define PAGES_DEFAULT 2     /* their prefetch_pages default */
#define PAGES_LIMIT 512
#define LFU_MAX 255         /* their MAX_FREQ */
#define LIST_MID (1ULL << 62)

struct stride_key {
	__u64 cgroup_id;
	__u64 va_block;
};

struct stride_state {
	__s32 last_page;
	__s32 stride;
	__s32 confidence;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct stride_key);
	__type(value, struct stride_state);
} stride_states SEC(".maps");

struct chunk_key {
	__u64 cgroup_id;
	__u64 chunk_id;
};

struct chunk_state {
	__u64 pos;  /* list position: smaller leaves first */
	__u32 freq; /* touches since it became resident, 1..LFU_MAX */
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct chunk_key);
	__type(value, struct chunk_state);
} lfu_chunks SEC(".maps");

/* The list clock: every move to the head or tail takes the next tick. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lfu_clock SEC(".maps");

static __always_inline __u64 lfu_tick(void)
{
	__u32 zero = 0;
	__u64 *c = bpf_map_lookup_elem(&lfu_clock, &zero);

	if (!c)
		return 0;
	return __sync_fetch_and_add(c, 1) + 1;
}

SEC("struct_ops/prefetch")
int BPF_PROG(stride_lfu_prefetch, struct gpuext_prefetch_ctx *pctx)
{
	struct stride_key key = {.cgroup_id = pctx->cgroup_id, .va_block = pctx->va_block};
	__s32 f = pctx->fault_page, cur, predicted, first = f, last = f;
	__u64 pages = bpf_gpuext_prefetch_param(pctx);
	struct stride_state *st, fresh = {};

	if (!pctx->tenant_id)
		return GPUEXT_RET_DEFAULT;
	if (!pages)
		pages = PAGES_DEFAULT;
	if (pages > PAGES_LIMIT)
		pages = PAGES_LIMIT;
	st = bpf_map_lookup_elem(&stride_states, &key);
	if (!st) {
		fresh.last_page = f;
		bpf_map_update_elem(&stride_states, &key, &fresh, BPF_ANY);
		goto request; /* the block's first fault: no prefetch */
	}
	cur = f - st->last_page;
	st->last_page = f;
	if (cur == 0)
		goto request;
	if (cur > STRIDE_MAX || cur < -STRIDE_MAX) {
		if (st->confidence > 0)
			st->confidence--;
		goto request;
	}
	if (cur == st->stride) {
		st->confidence++;
	} else {
		if (st->confidence > 0)
			st->confidence--;
		st->stride = cur;
	}
	if (st->confidence < STRIDE_CONFIDENCE)
		goto request;
	predicted = f + st->stride;
	if (st->stride > 0) {
		if (predicted > (__s32)pctx->region_last)
			goto request; /* nothing of the prediction is in the block */
		last = predicted + (__s32)pages - 1;
		if (last > (__s32)pctx->region_last)
			last = pctx->region_last;
	} else {
		if (predicted < (__s32)pctx->region_first)
			goto request;
		first = predicted - (__s32)pages + 1;
		if (first < (__s32)pctx->region_first)
			first = pctx->region_first;
	}
request:
	if (bpf_gpuext_prefetch_set_region(pctx, first, last))
		return GPUEXT_RET_DEFAULT;
	return GPUEXT_RET_HANDLED;
}

/* Became resident: the head of the list, freq 1. */
SEC("struct_ops/block_activate")
int BPF_PROG(stride_lfu_activate, struct gpuext_block_ctx *bctx)
{
	struct chunk_key key = {.cgroup_id = bctx->cgroup_id, .chunk_id = bctx->chunk_id};
	struct chunk_state st = {.pos = LIST_MID - lfu_tick(), .freq = 1};

	bpf_map_update_elem(&lfu_chunks, &key, &st, BPF_ANY);
	return 0;
}

/* Touched: one more, and to the tail while below LFU_MAX. */
SEC("struct_ops/block_access")
int BPF_PROG(stride_lfu_access, struct gpuext_block_ctx *bctx)
{
	struct chunk_key key = {.cgroup_id = bctx->cgroup_id, .chunk_id = bctx->chunk_id};
	struct chunk_state *st = bpf_map_lookup_elem(&lfu_chunks, &key);

	if (!st || st->freq >= LFU_MAX)
		return 0;
	st->freq++;
	st->pos = LIST_MID + lfu_tick();
	return 0;
}

/* A chunk the policy never saw (resident before it was attached) keeps the driver's LRU place, ahead of the list. */
static __always_inline __u64 lfu_pos(__u64 cgid, const struct gpuext_chunk_info *c)
{
	struct chunk_key key = {.cgroup_id = cgid, .chunk_id = c->chunk_id};
	struct chunk_state *st = bpf_map_lookup_elem(&lfu_chunks, &key);

	if (!st)
		return c->access_seq & ((LIST_MID >> 1) - 1);
	return st->pos;
}

SEC("struct_ops/evict_prepare")
int BPF_PROG(stride_lfu_evict_prepare, struct gpuext_evict_ctx *ectx)
{
	__u64 cgid = ectx->cgroup_id;
	__u32 i, j;

	/*
	 * Selection sort through the request kfuncs: each round moves the
	 * largest remaining position to the front, so after n rounds the
	 * smallest leads.  Loops are bounded by the constant and end on the
	 * kfunc's end-of-list answer.
	 */
	for (i = 0; i < GPUEXT_EVICT_MAX_CANDIDATES; i++) {
		struct gpuext_chunk_info c = {};
		__u32 best = i;
		__u64 best_pos;

		if (bpf_gpuext_evict_chunk(ectx, i, &c))
			break;
		best_pos = lfu_pos(cgid, &c);
		for (j = i + 1; j < GPUEXT_EVICT_MAX_CANDIDATES; j++) {
			__u64 p;

			if (bpf_gpuext_evict_chunk(ectx, j, &c))
				break;
			p = lfu_pos(cgid, &c);
			if (p > best_pos) {
				best = j;
				best_pos = p;
			}
		}
		if (bpf_gpuext_evict_move_to_front(ectx, best))
			return GPUEXT_RET_DEFAULT;
	}
	return GPUEXT_RET_HANDLED;
}

GPUEXT_MEM_OPS(stride_lfu_ops) = {
	.prefetch = (void *)stride_lfu_prefetch,
	.evict_prepare = (void *)stride_lfu_evict_prepare,
	.block_activate = (void *)stride_lfu_activate,
	.block_access = (void *)stride_lfu_access,
};

GPUEXT_LICENSE;
