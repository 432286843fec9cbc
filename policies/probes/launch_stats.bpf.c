//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * launch_stats.bpf.c - probe "launch-stats": per tenant, kernel launches,
 * blocks, and the time blocks run.
 *
 * Thread 0 of each block counts the block at entry and keeps the entry time
 * in its warp's copy of ls_start (a per-warp map: the warp holding thread 0
 * is the one that reaches the exit); at exit it adds (exit - entry) to
 * block_ns and counts block_exits, so the host reports the mean block time
 * as block_ns / block_exits.  Thread 0 of block 0 counts the launch.
 */
#include "gpuext_probe.h"

/* ls_counters indexes; the catalog (catalog/launch-stats.json) names them. */
#define LS_LAUNCHES 0
#define LS_BLOCKS 1
#define LS_BLOCK_NS 2
#define LS_BLOCK_EXITS 3
#define LS_NCOUNTERS 4

/*
 * Per-warp counters (PERCPU_ARRAY on the device: one copy per SM warp slot,
 * summed by the host). Every block's thread 0 counts, so a shared array
 * would take one contended atomic per block per counter on the same L2
 * line; a warp's own slot takes a plain add (the slot belongs to the warp
 * for as long as it runs, and only its leader thread writes it).
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, LS_NCOUNTERS);
} ls_counters SEC(".maps");

#define ls_count(idx, n)                                                   \
	do {                                                               \
		__u32 __k = (idx);                                         \
		__u64 *__v = bpf_map_lookup_elem(&ls_counters, &__k);     \
		if (__v)                                                   \
			*__v += (n);                                       \
	} while (0)

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} ls_start SEC(".maps");

SEC("gpuext/kernel_entry")
int launch_stats_entry(struct gpuext_probe_ctx *ctx)
{
	__u32 zero = 0;
	__u64 *start;

	if (gpuext_thread_linear_id() != 0)
		return 0;
	start = bpf_map_lookup_elem(&ls_start, &zero);
	if (start)
		*start = gpuext_globaltimer();
	ls_count(LS_BLOCKS, 1);
	if (gpuext_block_linear_id() == 0)
		ls_count(LS_LAUNCHES, 1);
	return 0;
}

SEC("gpuext/kernel_exit")
int launch_stats_exit(struct gpuext_probe_ctx *ctx)
{
	__u32 zero = 0;
	__u64 *start, now, t0;

	if (gpuext_thread_linear_id() != 0)
		return 0;
	start = bpf_map_lookup_elem(&ls_start, &zero);
	if (!start)
		return 0;
	t0 = *start;
	now = gpuext_globaltimer();
	if (t0 == 0 || now < t0)
		return 0;
	ls_count(LS_BLOCK_NS, now - t0);
	ls_count(LS_BLOCK_EXITS, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
