//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * launch_latency.bpf.c - probe "launch-latency": the time from the host's
 * cuLaunchKernel (ctx->launch_ns, written by the interposer; the catalog
 * entry asks for it) to the entry of the launch's first block (block 0,
 * thread 0), as a log2 histogram: bucket b counts latencies of bit length b,
 * i.e. [2^(b-1), 2^b) ns, bucket 0 a latency of 0.  lat_misc counts the
 * launches that could not be measured: [0] no launch time, [1] a device
 * clock behind the host's.
 */
#include "gpuext_probe.h"

#define LAT_BUCKETS 64
#define LAT_NO_LAUNCH_TIME 0
#define LAT_CLOCK_BEHIND 1

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, LAT_BUCKETS);
} lat_hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 2);
} lat_misc SEC(".maps");

static __always_inline __u32 bit_length(__u64 v)
{
	__u32 n = 0;

	if (v >> 32) {
		n += 32;
		v >>= 32;
	}
	if (v >> 16) {
		n += 16;
		v >>= 16;
	}
	if (v >> 8) {
		n += 8;
		v >>= 8;
	}
	if (v >> 4) {
		n += 4;
		v >>= 4;
	}
	if (v >> 2) {
		n += 2;
		v >>= 2;
	}
	if (v >> 1) {
		n += 1;
		v >>= 1;
	}
	return n + (__u32)v;
}

SEC("gpuext/kernel_entry")
int launch_latency_entry(struct gpuext_probe_ctx *ctx)
{
	__u64 launch, now;
	__u32 b;

	if (gpuext_thread_linear_id() != 0 || gpuext_block_linear_id() != 0)
		return 0;
	launch = ctx->launch_ns;
	if (launch == 0) {
		gpuext_count(&lat_misc, LAT_NO_LAUNCH_TIME, 1);
		return 0;
	}
	now = gpuext_globaltimer();
	if (now < launch) {
		gpuext_count(&lat_misc, LAT_CLOCK_BEHIND, 1);
		return 0;
	}
	b = bit_length(now - launch);
	if (b >= LAT_BUCKETS)
		b = LAT_BUCKETS - 1;
	gpuext_count(&lat_hist, b, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
