//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * sm_histogram.bpf.c - probe "sm-histogram": how a tenant's blocks spread
 * over the GPU's SMs.  Thread 0 of each block increments smh_counts[%smid]
 * at entry; the host shows how many SMs ran blocks, and the fewest and most
 * blocks an SM ran.
 */
#include "gpuext_probe.h"

#define SMH_MAX_SMS 256

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, SMH_MAX_SMS);
} smh_counts SEC(".maps");

SEC("gpuext/kernel_entry")
int sm_histogram_entry(struct gpuext_probe_ctx *ctx)
{
	if (gpuext_thread_linear_id() != 0)
		return 0;
	gpuext_count(&smh_counts, bpf_get_smp_processor_id(), 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
