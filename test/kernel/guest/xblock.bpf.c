//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * xblock.bpf.c - a test-only cross-block prefetch: at the first fault in
 * VA block b (no page of it resident) it starts a BPF workqueue item that
 * migrates the next XBLOCK_AHEAD blocks whole through the sleepable
 * bpf_gpuext_migrate_range(); the faulting block itself keeps the stock
 * prefetch.  A tenant names it by its GPUEXT_POLICY_NAMED id ("xblock").
 */
#include "gpuext_policy.h"

#define XBLOCK_AHEAD 4
#define XBLOCK_PAGES 512

/* linux/bpf.h of the build host may predate the kernel's workqueue type. */
struct bpf_wq {
	__u64 __opaque[2];
} __attribute__((aligned(8)));

extern int bpf_wq_init(struct bpf_wq *wq, void *p__map, unsigned int flags) __ksym;
extern int bpf_wq_start(struct bpf_wq *wq, unsigned int flags) __ksym;
extern int bpf_wq_set_callback_impl(struct bpf_wq *wq, int (callback_fn)(void *map, int *key, void *value),
				    unsigned int flags, void *aux__ign) __ksym;

struct xblock_work {
	struct bpf_wq wq;
	__u64 ctx_id;
	__u64 first_block;
	__u32 tenant_id;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u64); /* ctx_id */
	__type(value, struct xblock_work);
} xblock_work SEC(".maps");

/* Results the test reads: [0] migrate calls, [1] pages migrated, [2] refused. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3);
	__type(key, __u32);
	__type(value, __u64);
} xblock_results SEC(".maps");

static void xblock_count(__u32 slot, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&xblock_results, &slot);

	if (v)
		__sync_fetch_and_add(v, n);
}

/* Runs in a workqueue (sleepable): migrate the blocks ahead. */
static int xblock_migrate(void *map, int *key, void *value)
{
	struct xblock_work *w = value;
	__u32 i;

	for (i = 0; i < XBLOCK_AHEAD; i++) {
		int n = bpf_gpuext_migrate_range(w->ctx_id, w->tenant_id, w->first_block + i, 0,
						 XBLOCK_PAGES - 1);

		xblock_count(0, 1);
		if (n < 0)
			xblock_count(2, 1);
		else
			xblock_count(1, n);
	}
	return 0;
}

SEC("struct_ops/prefetch")
int BPF_PROG(xblock_prefetch, struct gpuext_prefetch_ctx *pctx)
{
	struct xblock_work *w, zero = {};
	__u64 key = pctx->ctx_id;

	if (bpf_gpuext_prefetch_resident(pctx, 0, XBLOCK_PAGES - 1) != 0)
		return GPUEXT_RET_DEFAULT; /* not the block's first fault */
	w = bpf_map_lookup_elem(&xblock_work, &key);
	if (!w) {
		bpf_map_update_elem(&xblock_work, &key, &zero, BPF_NOEXIST);
		w = bpf_map_lookup_elem(&xblock_work, &key);
		if (!w)
			return GPUEXT_RET_DEFAULT;
		if (bpf_wq_init(&w->wq, &xblock_work, 0) ||
		    bpf_wq_set_callback_impl(&w->wq, xblock_migrate, 0, 0))
			return GPUEXT_RET_DEFAULT;
	}
	w->ctx_id = pctx->ctx_id;
	w->tenant_id = pctx->tenant_id;
	w->first_block = pctx->va_block + 1;
	bpf_wq_start(&w->wq, 0);
	return GPUEXT_RET_DEFAULT; /* this block: the stock prefetch */
}

GPUEXT_MEM_OPS(xblock_ops) = {
	.prefetch = (void *)xblock_prefetch,
	.name = "xblock",
};

GPUEXT_LICENSE;
