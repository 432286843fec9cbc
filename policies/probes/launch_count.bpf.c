//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * launch_count.bpf.c - probe "launch-count": per tenant, kernel launches
 * and blocks entered and exited, without timing: the cheapest entry+exit
 * probe (no timer reads). launch-stats counts the same and also times the
 * blocks.
 *
 * Thread 0 of each block counts the block at entry and its exit at exit;
 * thread 0 of block 0 counts the launch. Every count is an atomic add whose
 * result is unused (a red.add: the SM does not wait for it).
 */
#include "gpuext_probe.h"

#define LC_LAUNCHES 0
#define LC_BLOCKS 1
#define LC_BLOCK_EXITS 2
#define LC_NCOUNTERS 3

/* Per-warp, as launch-stats' counters: no shared L2 line for every block. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, LC_NCOUNTERS);
} lc_counters SEC(".maps");

SEC("gpuext/kernel_entry")
int launch_count_entry(struct gpuext_probe_ctx *ctx)
{
	if (gpuext_thread_linear_id() != 0)
		return 0;
	gpuext_count(&lc_counters, LC_BLOCKS, 1);
	if (gpuext_block_linear_id() == 0)
		gpuext_count(&lc_counters, LC_LAUNCHES, 1);
	return 0;
}

SEC("gpuext/kernel_exit")
int launch_count_exit(struct gpuext_probe_ctx *ctx)
{
	if (gpuext_thread_linear_id() != 0)
		return 0;
	gpuext_count(&lc_counters, LC_BLOCK_EXITS, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
