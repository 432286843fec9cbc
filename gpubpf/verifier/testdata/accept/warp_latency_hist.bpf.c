// Per-warp latency: lane 0 stamps the warp's start at entry; at exit it
// computes the duration, its bit length in a real loop, and bumps that
// bucket of a log2 histogram held in one array value (indexed by a
// bounded variable).
#include "probe.h"

#define NBUCKETS 64

struct hist {
	__u64 bucket[NBUCKETS];
};

struct {
	__uint(type, MAP_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} warp_start SEC(".maps");

struct {
	__uint(type, MAP_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hist);
} lat SEC(".maps");

SEC(GPUEXT_PROBE_SEC_ENTRY)
int lat_entry(struct gpuext_probe_ctx *ctx)
{
	__u32 key = 0;
	__u64 *t;

	if (gpuext_lane_id() != 0)
		return 0;
	t = bpf_map_lookup_elem(&warp_start, &key);
	if (t)
		*t = gpuext_globaltimer();
	return 0;
}

SEC(GPUEXT_PROBE_SEC_EXIT)
int lat_exit(struct gpuext_probe_ctx *ctx)
{
	__u32 key = 0, b;
	__u64 *t, d;
	struct hist *h;

	if (gpuext_lane_id() != 0)
		return 0;
	t = bpf_map_lookup_elem(&warp_start, &key);
	h = bpf_map_lookup_elem(&lat, &key);
	if (!t || !h)
		return 0;
	d = gpuext_globaltimer() - *t;
#pragma clang loop unroll(disable)
	for (b = 0; b < NBUCKETS - 1 && d; b++)
		d >>= 1;
	__sync_fetch_and_add(&h->bucket[b], 1);
	return 0;
}
