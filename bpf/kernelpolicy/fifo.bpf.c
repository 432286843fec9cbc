//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * fifo.bpf.c - FIFO eviction: chunks leave in the order they became
 * resident, however often they were touched since.  Memory ops "fifo"
 * (tenant config eviction_policy = GPUEXT_EVICT_FIFO).
 */
#include "evict_sort.h"

SEC("struct_ops/evict_prepare")
int BPF_PROG(fifo_evict_prepare, struct gpuext_evict_ctx *ectx)
{
	return gpuext_evict_sort(ectx, EVICT_KEY_ALLOC);
}

SEC(".struct_ops.link")
struct gpuext_mem_ops fifo_ops = {
	.evict_prepare = (void *)fifo_evict_prepare,
	.name = "fifo",
};

char LICENSE[] SEC("license") = "GPL";
