/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/* two.bpf.c - test fixture: two programs at device attach points (a descriptor must list both). */
#include "gpuext_probe.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 2);
} two_counts SEC(".maps");

SEC("gpuext/kernel_entry")
int two_entry(struct gpuext_probe_ctx *ctx)
{
	if (gpuext_thread_linear_id() == 0 && gpuext_block_linear_id() == 0)
		gpuext_count(&two_counts, 0, 1);
	return 0;
}

SEC("gpuext/kernel_exit")
int two_exit(struct gpuext_probe_ctx *ctx)
{
	if (gpuext_thread_linear_id() == 0 && gpuext_block_linear_id() == 0)
		gpuext_count(&two_counts, 1, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
