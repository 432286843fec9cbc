//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * mru.bpf.c - MRU eviction: the chunk touched most recently leaves first,
 * which keeps the start of a cyclic scan larger than device memory resident.
 * Memory ops "mru" (tenant config eviction_policy = GPUEXT_EVICT_MRU).
 */
#include "evict_sort.h"

SEC("struct_ops/evict_prepare")
int BPF_PROG(mru_evict_prepare, struct gpuext_evict_ctx *ectx)
{
	return gpuext_evict_sort(ectx, EVICT_KEY_RECENT);
}

SEC(".struct_ops.link")
struct gpuext_mem_ops mru_ops = {
	.evict_prepare = (void *)mru_evict_prepare,
	.name = "mru",
};

char LICENSE[] SEC("license") = "GPL";
