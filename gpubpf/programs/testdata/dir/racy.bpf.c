/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/* racy.bpf.c - test fixture: every thread adds to one counter, no leader guard: the verifier refuses it. */
#include "gpuext_probe.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} racy_counts SEC(".maps");

SEC("gpuext/kernel_entry")
int racy_entry(struct gpuext_probe_ctx *ctx)
{
	__u32 zero = 0;
	__u64 *v = bpf_map_lookup_elem(&racy_counts, &zero);

	if (v)
		*v += gpuext_thread_linear_id();
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
