//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * lfu.bpf.c - LFU eviction: the chunk touched least often since it became
 * resident leaves first (ties: the one touched longest ago), so a hot set
 * survives a scan of cold chunks.  Memory ops "lfu"
 * (tenant config eviction_policy = GPUEXT_EVICT_LFU).
 */
#include "evict_sort.h"

SEC("struct_ops/evict_prepare")
int BPF_PROG(lfu_evict_prepare, struct gpuext_evict_ctx *ectx)
{
	return gpuext_evict_sort(ectx, EVICT_KEY_FREQ);
}

SEC(".struct_ops.link")
struct gpuext_mem_ops lfu_ops = {
	.evict_prepare = (void *)lfu_evict_prepare,
	.name = "lfu",
};

char LICENSE[] SEC("license") = "GPL";
