//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * freq_decay.bpf.c - frequency-decay eviction, after gpu_ext's per-process
 * frequency decay (ported by hand): LRU whose recency a chunk earns only
 * every period-th access.  The policy counts a chunk's accesses
 * (block_access) and stamps each with its own clock; at eviction a chunk's
 * key is the clock of its last access whose number is a multiple of
 * period (the activation clock before the first such access), and the
 * smallest key leaves first.  So a chunk touched fewer than period times
 * since it became resident ranks by its arrival, however recently it was
 * touched, and period 1 is plain LRU.  Memory ops "freq_decay" (the
 * catalog's freq-decay; period is the tenant's eviction_param, 1..16,
 * 0 meaning the catalog's default 4).
 *
 * Unlike lfu it never compares counts: a chunk touched 100 times and one
 * touched period times rank by when they last earned recency, and lfu's
 * aging is per eviction pass, this one's per access.
 *
 * block_access carries no tenant parameter, so the period is applied at
 * evict_prepare: each chunk keeps the clocks of its last FD_RING accesses,
 * enough for any period up to FD_RING.  A chunk the policy never saw
 * activate (attached after it arrived) has key 0 and leaves first.
 */
#include "evict_sort.h"

#define FD_RING 16 /* the largest period */
#define FD_DEFAULT_PERIOD 4 /* the catalog's default, for a config without one */

struct fd_key {
	__u64 cgroup_id;
	__u64 chunk_id;
};

struct fd_chunk {
	__u64 activated;      /* clock at block_activate */
	__u64 accesses;       /* block_access calls since then */
	__u64 clock[FD_RING]; /* clock of access n at clock[n % FD_RING] */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct fd_key);
	__type(value, struct fd_chunk);
} fd_chunks SEC(".maps");

/* The policy's clock: one tick per activation or access, never 0. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} fd_clock SEC(".maps");

static __always_inline __u64 fd_tick(void)
{
	__u32 zero = 0;
	__u64 *c = bpf_map_lookup_elem(&fd_clock, &zero);

	return c ? __sync_add_and_fetch(c, 1) : 0;
}

SEC("struct_ops/block_activate")
int BPF_PROG(freq_decay_block_activate, struct gpuext_block_ctx *bctx)
{
	struct fd_key k = { .cgroup_id = bctx->cgroup_id, .chunk_id = bctx->chunk_id };
	struct fd_chunk fresh = {};

	fresh.activated = fd_tick();
	bpf_map_update_elem(&fd_chunks, &k, &fresh, BPF_ANY);
	return 0;
}

SEC("struct_ops/block_access")
int BPF_PROG(freq_decay_block_access, struct gpuext_block_ctx *bctx)
{
	struct fd_key k = { .cgroup_id = bctx->cgroup_id, .chunk_id = bctx->chunk_id };
	struct fd_chunk *s = bpf_map_lookup_elem(&fd_chunks, &k);

	if (!s)
		return 0; /* not seen arriving: stays at key 0 */
	s->accesses++;
	s->clock[s->accesses & (FD_RING - 1)] = fd_tick();
	return 0;
}

/* Key of candidate c: the clock of its last access numbered a multiple of period. */
static __always_inline __u64 fd_key_of(__u64 cgid, const struct gpuext_chunk_info *c, __u64 period)
{
	struct fd_key k = { .cgroup_id = cgid, .chunk_id = c->chunk_id };
	struct fd_chunk *s = bpf_map_lookup_elem(&fd_chunks, &k);
	__u64 m;

	if (!s)
		return 0;
	m = s->accesses - s->accesses % period; /* accesses - m < period <= FD_RING: still in the ring */
	return m ? s->clock[m & (FD_RING - 1)] : s->activated;
}

SEC("struct_ops/evict_prepare")
int BPF_PROG(freq_decay_evict_prepare, struct gpuext_evict_ctx *ectx)
{
	__u64 period = bpf_gpuext_evict_param(ectx), cgid = ectx->cgroup_id;

	if (!period)
		period = FD_DEFAULT_PERIOD;
	if (period > FD_RING)
		period = FD_RING; /* the catalog allows 1..16 */
	return gpuext_evict_sort_by(ectx, c, fd_key_of(cgid, c, period));
}

SEC(".struct_ops.link")
struct gpuext_mem_ops freq_decay_ops = {
	.evict_prepare = (void *)freq_decay_evict_prepare,
	.block_activate = (void *)freq_decay_block_activate,
	.block_access = (void *)freq_decay_block_access,
	.name = "freq_decay",
};

char LICENSE[] SEC("license") = "GPL";
