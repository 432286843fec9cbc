//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * lfu.bpf.c - LFU eviction with aging: the chunk with the lowest decayed
 * access frequency leaves first (ties: the one touched longest ago), so a
 * hot set survives a scan of cold chunks, and a set that was hot long ago
 * stops being protected.  Memory ops "lfu"
 * (tenant config eviction_policy = GPUEXT_EVICT_LFU).
 *
 * Each evict_prepare call is an aging pass over the context's resident
 * chunks: a chunk's score loses decay percent (the tenant's
 * eviction_param, the catalog's lfu "decay", 1..100), then gains the
 * accesses it had since the previous pass.  decay 0 (not configured) keeps
 * every access forever: the score is the access count since the chunk
 * became resident.  Scores are per (cgroup, chunk) in an LRU hash, so each
 * tenant ages with its own decay.
 */
#include "evict_sort.h"

#define LFU_SCALE 1024 /* fixed point: one access */
#define LFU_MAX_DECAY 100

struct lfu_key {
	__u64 cgroup_id;
	__u64 chunk_id;
};

struct lfu_score {
	__u64 alloc_seq;   /* a chunk that became resident again starts over */
	__u64 last_count;  /* access_count at the previous pass */
	__u64 score;       /* decayed accesses, LFU_SCALE each */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct lfu_key);
	__type(value, struct lfu_score);
} lfu_scores SEC(".maps");

/* Age candidate c of this pass; returns its new score. */
static __always_inline __u64 lfu_age(__u64 cgid, const struct gpuext_chunk_info *c, __u64 decay)
{
	struct lfu_key k = { .cgroup_id = cgid, .chunk_id = c->chunk_id };
	struct lfu_score *s, fresh = {};

	s = bpf_map_lookup_elem(&lfu_scores, &k);
	if (!s || s->alloc_seq != c->alloc_seq || c->access_count < s->last_count) {
		fresh.alloc_seq = c->alloc_seq;
		fresh.last_count = c->access_count;
		fresh.score = c->access_count * LFU_SCALE;
		bpf_map_update_elem(&lfu_scores, &k, &fresh, BPF_ANY);
		return fresh.score;
	}
	s->score = s->score * (LFU_MAX_DECAY - decay) / LFU_MAX_DECAY +
		   (c->access_count - s->last_count) * LFU_SCALE;
	s->last_count = c->access_count;
	return s->score;
}

static __always_inline __u64 lfu_score_of(__u64 cgid, const struct gpuext_chunk_info *c)
{
	struct lfu_key k = { .cgroup_id = cgid, .chunk_id = c->chunk_id };
	struct lfu_score *s = bpf_map_lookup_elem(&lfu_scores, &k);

	return s ? s->score : c->access_count * LFU_SCALE;
}

/* Sort key: score, then the access clock (equal scores go LRU). */
static __always_inline __u64 lfu_key_of(__u64 cgid, const struct gpuext_chunk_info *c)
{
	__u64 score = lfu_score_of(cgid, c) / (LFU_SCALE / 16); /* 1/16 access resolution */

	return (score << EVICT_FREQ_SEQ_BITS) | (c->access_seq & ((1ULL << EVICT_FREQ_SEQ_BITS) - 1));
}

SEC("struct_ops/evict_prepare")
int BPF_PROG(lfu_evict_prepare, struct gpuext_evict_ctx *ectx)
{
	__u64 decay = bpf_gpuext_evict_param(ectx), cgid = ectx->cgroup_id;
	__u32 i;

	if (decay > LFU_MAX_DECAY)
		decay = LFU_MAX_DECAY; /* the catalog allows 1..100 */
	for (i = 0; i < GPUEXT_EVICT_MAX_CANDIDATES; i++) {
		struct gpuext_chunk_info c = {};

		if (bpf_gpuext_evict_chunk(ectx, i, &c))
			break;
		lfu_age(cgid, &c, decay);
	}
	return gpuext_evict_sort_by(ectx, c, lfu_key_of(cgid, c));
}

SEC(".struct_ops.link")
struct gpuext_mem_ops lfu_ops = {
	.evict_prepare = (void *)lfu_evict_prepare,
	.name = "lfu",
};

char LICENSE[] SEC("license") = "GPL";
