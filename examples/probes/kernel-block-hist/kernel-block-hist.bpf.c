/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * kernel-block-hist.bpf.c - example device probe "kernel-block-hist": how
 * long each kernel's blocks run, as a log2 histogram per kernel, in a hash
 * keyed by (kernel id, bucket).
 *
 * Thread 0 of each block stamps the block's start at kernel entry into a
 * per-warp array (the warp keeps its slot from entry to exit); at exit it
 * takes the block's run time, its bit length b (bucket b counts times in
 * [2^(b-1), 2^b) ns) and adds one to the entry (kernel, b), inserting it
 * when it is the first. Only thread 0 of a block acts: the verifier's
 * leader guard.
 */
#include "gpuext_probe.h"

struct kbh_key {
	__u64 kernel; /* ctx->kernel_id: FNV-1a 64 of the .entry name */
	__u32 bucket; /* bit length of the block's run time in ns */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct kbh_key);
	__type(value, __u64);
	__uint(max_entries, 1024);
} kbh_hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} kbh_start SEC(".maps");

static __always_inline __u32 bit_length(__u64 v)
{
	__u32 n = 0;

	if (v >> 32) { v >>= 32; n += 32; }
	if (v >> 16) { v >>= 16; n += 16; }
	if (v >> 8) { v >>= 8; n += 8; }
	if (v >> 4) { v >>= 4; n += 4; }
	if (v >> 2) { v >>= 2; n += 2; }
	if (v >> 1) { v >>= 1; n += 1; }
	return n + (__u32)v;
}

SEC("gpuext/kernel_entry")
int kbh_entry(struct gpuext_probe_ctx *ctx)
{
	__u32 zero = 0;
	__u64 *start;

	if (gpuext_thread_linear_id() != 0)
		return 0;
	start = bpf_map_lookup_elem(&kbh_start, &zero);
	if (start)
		*start = gpuext_globaltimer();
	return 0;
}

SEC("gpuext/kernel_exit")
int kbh_exit(struct gpuext_probe_ctx *ctx)
{
	struct kbh_key key = {};
	__u32 zero = 0;
	__u64 *start, *count, one = 1;

	if (gpuext_thread_linear_id() != 0)
		return 0;
	start = bpf_map_lookup_elem(&kbh_start, &zero);
	if (!start)
		return 0;
	key.kernel = ctx->kernel_id;
	key.bucket = bit_length(gpuext_globaltimer() - *start);
	count = bpf_map_lookup_elem(&kbh_hist, &key);
	if (!count) {
		if (bpf_map_update_elem(&kbh_hist, &key, &one, BPF_NOEXIST) == 0)
			return 0;
		count = bpf_map_lookup_elem(&kbh_hist, &key); /* another block inserted it first */
		if (!count)
			return 0;
	}
	__sync_fetch_and_add(count, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
