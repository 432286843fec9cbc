// A real loop (unrolling disabled) over 8 array entries: the verifier
// proves it ends. Lane 0 of each warp publishes the sum.
#include "probe.h"

struct {
	__uint(type, MAP_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} items SEC(".maps");

struct {
	__uint(type, MAP_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} total SEC(".maps");

SEC(GPUEXT_PROBE_SEC_EXIT)
int sum_exit(struct gpuext_probe_ctx *ctx)
{
	__u64 sum = 0, *v;
	__u32 i, key;

#pragma clang loop unroll(disable)
	for (i = 0; i < 8; i++) {
		key = i;
		v = bpf_map_lookup_elem(&items, &key);
		if (v)
			sum += *v;
	}
	if (gpuext_lane_id() != 0)
		return 0;
	key = 0;
	v = bpf_map_lookup_elem(&total, &key);
	if (v)
		*v = sum;
	return 0;
}
