/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * seq-adapt.bpf.c - per-tenant adaptive sequential prefetch, built with the
 * gpuext SDK (docs/write-a-policy.md); not one of the built-in policies.
 *
 * Each tenant has its own window.  A fault right after the region the
 * tenant's last fault migrated (a sequential stream, also across VA
 * blocks) doubles the window up to `max-pages` (the tenant's
 * prefetch_param, default 64); any other fault starts again at one page.
 * A sequential scan so faults O(log max + pages / max) times, a random one
 * migrates no page it did not touch.
 */
#include "gpuext_policy.h"

GPUEXT_POLICY_ABI;

#define MAX_DEFAULT 64
#define MAX_LIMIT 512
#define BLOCK_PAGES 512

struct stream {
	__u32 next;   /* the page after the last region (mod BLOCK_PAGES) */
	__u32 window; /* pages the last region had */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GPUEXT_MAX_TENANTS);
	__type(key, __u32);   /* tenant id */
	__type(value, struct stream);
} seq_streams SEC(".maps");

SEC("struct_ops/prefetch")
int BPF_PROG(seq_adapt_prefetch, struct gpuext_prefetch_ctx *pctx)
{
	__u64 max = bpf_gpuext_prefetch_param(pctx);
	__u32 tenant = pctx->tenant_id, f = pctx->fault_page, window = 1, last;
	struct stream *s, fresh = {};

	if (!tenant)
		return GPUEXT_RET_DEFAULT; /* not a tenant: the driver's stock prefetch */
	if (!max)
		max = MAX_DEFAULT;
	if (max > MAX_LIMIT)
		max = MAX_LIMIT;
	s = bpf_map_lookup_elem(&seq_streams, &tenant);
	if (s && s->next == f) {
		window = s->window * 2;
		if (window > max)
			window = max;
	}
	last = f + window - 1;
	if (last > pctx->region_last || last < f)
		last = pctx->region_last;
	if (bpf_gpuext_prefetch_set_region(pctx, f, last))
		return GPUEXT_RET_DEFAULT;
	fresh.next = (last + 1) % BLOCK_PAGES;
	fresh.window = window;
	bpf_map_update_elem(&seq_streams, &tenant, &fresh, BPF_ANY);
	return GPUEXT_RET_HANDLED;
}

GPUEXT_MEM_OPS(seq_adapt_ops) = {
	.prefetch = (void *)seq_adapt_prefetch,
};

GPUEXT_LICENSE;
