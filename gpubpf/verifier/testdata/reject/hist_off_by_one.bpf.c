// The bucket loop may leave b == 64: one past the 64 buckets.
// want: "value access out of bounds: bytes [512, 520) of a 512-byte value" at line 32
#include "probe.h"

struct hist {
	__u64 bucket[64];
};

struct {
	__uint(type, MAP_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hist);
} lat SEC(".maps");

SEC(GPUEXT_PROBE_SEC_EXIT)
int lat_exit(struct gpuext_probe_ctx *ctx)
{
	__u32 key = 0, b;
	__u64 d;
	struct hist *h;

	if (gpuext_lane_id() != 0)
		return 0;
	h = bpf_map_lookup_elem(&lat, &key);
	if (!h)
		return 0;
	d = gpuext_globaltimer() - ctx->launch_ns;
#pragma clang loop unroll(disable)
	for (b = 0; b < 64 && d; b++)
		d >>= 1;
	__sync_fetch_and_add(&h->bucket[b], 1);
	return 0;
}
