/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/* mixed.bpf.c - test fixture: one object, three programs with three verdicts: one the verifier passes, one with an unbounded loop, one at bpftime's memory-access point. */
#include "gpuext_probe.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 2);
} mixed_counts SEC(".maps");

/* passes: the leader of the launch counts it */
SEC("gpuext/kernel_exit")
int mixed_ok(struct gpuext_probe_ctx *ctx)
{
	if (gpuext_thread_linear_id() == 0 && gpuext_block_linear_id() == 0)
		gpuext_count(&mixed_counts, 0, 1);
	return 0;
}

/* refused: the loop spins until a map value is 0, which nothing bounds */
SEC("gpuext/kernel_entry")
int mixed_spin(struct gpuext_probe_ctx *ctx)
{
	__u32 one = 1;
	__u64 *n = bpf_map_lookup_elem(&mixed_counts, &one);

	if (!n)
		return 0;
	while (*(volatile __u64 *)n != 0)
		; /* waits for the host to clear it: nothing bounds the wait */
	return 0;
}

/* refused: bpftime runs this at every load and store; gpuext does not */
SEC("kprobe/__memcapture")
int mixed_mem(void *ctx)
{
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
