//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * blockcount.bpf.c - a test-only policy that counts the block_activate and
 * block_access notifications per cgroup, so a guest test can compare them
 * with what gpusim replayed.  It takes the "prio_weighted" slot
 * (GPUEXT_EVICT_PRIORITY_WEIGHTED) so a tenant can name it, and leaves the
 * eviction order to the driver; the catalog's priority-weighted policy must
 * not be attached at the same time.
 */
#include "evict_sort.h"

struct block_counts {
	__u64 activates;
	__u64 accesses;
	__u64 max_access_count; /* largest access_count a notification carried */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u64); /* cgroup id */
	__type(value, struct block_counts);
} block_counts SEC(".maps");

static __always_inline struct block_counts *counts_of(__u64 cgid)
{
	struct block_counts zero = {}, *c;

	c = bpf_map_lookup_elem(&block_counts, &cgid);
	if (c)
		return c;
	bpf_map_update_elem(&block_counts, &cgid, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&block_counts, &cgid);
}

SEC("struct_ops/block_activate")
int BPF_PROG(blockcount_activate, struct gpuext_block_ctx *bctx)
{
	struct block_counts *c = counts_of(bctx->cgroup_id);

	if (c)
		__sync_fetch_and_add(&c->activates, 1);
	return 0;
}

SEC("struct_ops/block_access")
int BPF_PROG(blockcount_access, struct gpuext_block_ctx *bctx)
{
	struct block_counts *c = counts_of(bctx->cgroup_id);

	if (!c)
		return 0;
	__sync_fetch_and_add(&c->accesses, 1);
	if (bctx->access_count > c->max_access_count)
		c->max_access_count = bctx->access_count;
	return 0;
}

SEC(".struct_ops.link")
struct gpuext_mem_ops blockcount_ops = {
	.block_activate = (void *)blockcount_activate,
	.block_access = (void *)blockcount_access,
	.name = "prio_weighted",
};

char LICENSE[] SEC("license") = "GPL";
