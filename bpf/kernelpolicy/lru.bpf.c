//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * lru.bpf.c - LRU eviction: the chunk accessed longest ago leaves first; a
 * re-touched chunk moves behind the others.  Memory ops "lru"
 * (tenant config eviction_policy = GPUEXT_EVICT_LRU).
 */
#include "evict_sort.h"

SEC("struct_ops/evict_prepare")
int BPF_PROG(lru_evict_prepare, struct gpuext_evict_ctx *ectx)
{
	return gpuext_evict_sort(ectx, EVICT_KEY_ACCESS);
}

SEC(".struct_ops.link")
struct gpuext_mem_ops lru_ops = {
	.evict_prepare = (void *)lru_evict_prepare,
	.name = "lru",
};

char LICENSE[] SEC("license") = "GPL";
