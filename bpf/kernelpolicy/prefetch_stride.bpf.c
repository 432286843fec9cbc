//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * prefetch_stride.bpf.c - stride prefetch: per GPU context (cgroup), when
 * two successive faults are the same distance d apart, the next fault
 * migrates the region up to STRIDE_AHEAD strides ahead, so the following
 * touches of the stride hit.  Until a stride is seen, only the faulting
 * page moves.  Memory ops "pf_stride"
 * (tenant config prefetch_policy = GPUEXT_PREFETCH_STRIDE).
 */
#include "prefetch_region.h"

#define STRIDE_AHEAD 8

struct stride_state {
	__u32 last;  /* last page of the stride known resident */
	__u32 delta; /* last distance between faults; 0 = none */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64); /* cgroup id of the GPU context */
	__type(value, struct stride_state);
} stride_states SEC(".maps");

SEC("struct_ops/prefetch")
int BPF_PROG(stride_prefetch, struct gpuext_prefetch_ctx *pctx)
{
	__u64 cgid = pctx->cgroup_id;
	__u32 f = pctx->fault_page, end = f, d = 0;
	struct stride_state *st, fresh = {};

	st = bpf_map_lookup_elem(&stride_states, &cgid);
	if (!st) {
		fresh.last = f;
		bpf_map_update_elem(&stride_states, &cgid, &fresh, BPF_ANY);
		goto request;
	}
	if (f > st->last)
		d = f - st->last;
	if (d && d == st->delta && d <= pctx->region_last) {
		__u32 room = pctx->region_last - f;
		__u32 steps = room / d;

		if (steps > STRIDE_AHEAD)
			steps = STRIDE_AHEAD;
		end = f + steps * d;
	}
	st->delta = d;
	st->last = end;
request:
	if (bpf_gpuext_prefetch_set_region(pctx, f, end))
		return GPUEXT_RET_DEFAULT;
	return GPUEXT_RET_HANDLED;
}

SEC(".struct_ops.link")
struct gpuext_mem_ops prefetch_stride_ops = {
	.prefetch = (void *)stride_prefetch,
	.name = "pf_stride",
};

char LICENSE[] SEC("license") = "GPL";
