/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * every_thread.bpf.c - a probe the verifier must reject: every thread adds
 * to the counter, not a leader (compile_test.go).
 */
#include "gpuext_probe.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} et_counts SEC(".maps");

SEC("gpuext/kernel_entry")
int every_thread_entry(struct gpuext_probe_ctx *ctx)
{
	__u32 zero = 0;
	__u64 *v = bpf_map_lookup_elem(&et_counts, &zero);

	if (v)
		*v += 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
