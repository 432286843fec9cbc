/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * slow-blocks.bpf.c - example device probe "slow-blocks": one ring-buffer
 * record per block that ran longer than SLOW_NS, with the kernel, the
 * block, the SM it ran on and its run time.
 *
 * Thread 0 of each block stamps the block's start at kernel entry into a
 * per-warp array; at exit it takes the run time and, when it is over the
 * threshold, writes one record. The ring buffer keeps the records until
 * it is full; the ones that do not fit are counted as dropped.
 */
#include "gpuext_probe.h"

#ifndef SLOW_NS
#define SLOW_NS 10000 /* 10 us */
#endif

struct slow_block {
	__u64 kernel; /* ctx->kernel_id */
	__u32 block;  /* linear block id */
	__u32 sm;     /* %smid at exit */
	__u64 ns;     /* run time of the block */
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} sb_records SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} sb_start SEC(".maps");

SEC("gpuext/kernel_entry")
int sb_entry(struct gpuext_probe_ctx *ctx)
{
	__u32 zero = 0;
	__u64 *start;

	if (gpuext_thread_linear_id() != 0)
		return 0;
	start = bpf_map_lookup_elem(&sb_start, &zero);
	if (start)
		*start = gpuext_globaltimer();
	return 0;
}

SEC("gpuext/kernel_exit")
int sb_exit(struct gpuext_probe_ctx *ctx)
{
	struct slow_block rec = {};
	__u32 zero = 0;
	__u64 *start;

	if (gpuext_thread_linear_id() != 0)
		return 0;
	start = bpf_map_lookup_elem(&sb_start, &zero);
	if (!start)
		return 0;
	rec.ns = gpuext_globaltimer() - *start;
	if (rec.ns <= SLOW_NS)
		return 0;
	rec.kernel = ctx->kernel_id;
	rec.block = (__u32)gpuext_block_linear_id();
	rec.sm = gpuext_sm_id();
	bpf_ringbuf_output(&sb_records, &rec, sizeof(rec), 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
