/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/* spin.bpf.c - test fixture: bpftime's directly_run in small: a loop nothing bounds over a map no view can show (u32 values). */
#include "gpuext_probe.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, 1);
} spin_input SEC(".maps");

SEC("gpuext/kernel_entry")
int spin_run(struct gpuext_probe_ctx *ctx)
{
	__u32 zero = 0;
	__u32 *n = bpf_map_lookup_elem(&spin_input, &zero);

	if (!n)
		return 0;
	while (*(volatile __u32 *)n != 0)
		; /* waits for the host to clear it: nothing bounds the wait */
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
