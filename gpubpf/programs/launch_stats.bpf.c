//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * launch_stats.bpf.c - probe "launch-stats": per tenant, kernel launches,
 * blocks, and the time blocks run.
 *
 * Thread 0 of each block counts the block at entry and subtracts its entry
 * time from block_ns; at exit it adds its exit time and counts the exit.
 * Once every counted block has exited, block_ns is the sum of
 * (exit - entry) over the blocks and the host reports the mean block time
 * as block_ns / block_exits (the catalog's "inFlight": while blocks !=
 * block_exits there is no mean).  Thread 0 of block 0 counts the launch.
 *
 * Every update is an atomic add whose result is unused: the translator
 * emits a reduction (red.add), which the SM issues without waiting, so the
 * probe holds a block only for reading the timer, never for a round trip
 * to memory.  Nothing is carried from entry to exit in memory.  In the
 * inline splice the entry's two adds wait for the exit in registers
 * (docs/device-probes.md, "What the splice emits"): the entry reads the
 * timer and makes no atomic (block 0 still counts the launch there), and
 * the exit makes three, the entry's stamp going out in the blockNs add.
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
 * summed by the host): every block's thread 0 updates them, and on one
 * shared array those reductions would queue on the same L2 line.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, LS_NCOUNTERS);
} ls_counters SEC(".maps");

SEC("gpuext/kernel_entry")
int launch_stats_entry(struct gpuext_probe_ctx *ctx)
{
	__u64 now;

	if (gpuext_thread_linear_id() != 0)
		return 0;
	now = gpuext_globaltimer();
	gpuext_count(&ls_counters, LS_BLOCK_NS, -now);
	gpuext_count(&ls_counters, LS_BLOCKS, 1);
	if (gpuext_block_linear_id() == 0)
		gpuext_count(&ls_counters, LS_LAUNCHES, 1);
	return 0;
}

SEC("gpuext/kernel_exit")
int launch_stats_exit(struct gpuext_probe_ctx *ctx)
{
	if (gpuext_thread_linear_id() != 0)
		return 0;
	gpuext_count(&ls_counters, LS_BLOCK_NS, gpuext_globaltimer());
	gpuext_count(&ls_counters, LS_BLOCK_EXITS, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
