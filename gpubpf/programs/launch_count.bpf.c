//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * launch_count.bpf.c - probe "launch-count": per tenant, kernel launches
 * and the blocks that ran, without timing: the cheapest probe, one atomic
 * add per block.
 *
 * Everything is counted at kernel exit, by thread 0 of each block: the
 * block (blocks = blocks that ran to their end), and in block 0 the launch.
 * A block that entered also exits: the patcher sends every ret/exit of the
 * kernel through the exit site, and a kernel that traps leaves a dead
 * context whose maps are never read again. So nothing is done at entry:
 * an entry count would only be a second atomic per block that says the
 * same (on the H200's 3.3 us kernel the exit-only shape costs 2.7%, entry
 * and exit 5.1%: test/gpu/probe_cost.cu). Each count is an atomic add
 * whose result is unused (a red.add: the SM does not wait for it).
 */
#include "gpuext_probe.h"

#define LC_LAUNCHES 0
#define LC_BLOCKS 1
#define LC_NCOUNTERS 2

/* Per-warp, as launch-stats' counters: no shared L2 line for every block. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, LC_NCOUNTERS);
} lc_counters SEC(".maps");

SEC("gpuext/kernel_exit")
int launch_count_exit(struct gpuext_probe_ctx *ctx)
{
	if (gpuext_thread_linear_id() != 0)
		return 0;
	gpuext_count(&lc_counters, LC_BLOCKS, 1);
	if (gpuext_block_linear_id() == 0)
		gpuext_count(&lc_counters, LC_LAUNCHES, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
