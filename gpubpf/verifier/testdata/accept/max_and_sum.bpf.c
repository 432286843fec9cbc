// A 64-iteration loop keeping a running sum and maximum: many paths with
// different ranges meet at every join point, and the exploration must
// merge them to finish within its budget.
#include "probe.h"

struct {
	__uint(type, MAP_ARRAY);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} items SEC(".maps");

struct {
	__uint(type, MAP_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

SEC(GPUEXT_PROBE_SEC_EXIT)
int stats_exit(struct gpuext_probe_ctx *ctx)
{
	__u64 sum = 0, mx = 0, *v;
	__u32 i, key;

	if (gpuext_lane_id() != 0)
		return 0;
#pragma clang loop unroll(disable)
	for (i = 0; i < 64; i++) {
		key = i;
		v = bpf_map_lookup_elem(&items, &key);
		if (!v)
			continue;
		if (*v > mx)
			mx = *v;
		sum += *v;
	}
	key = 0;
	v = bpf_map_lookup_elem(&stats, &key);
	if (v)
		*v = sum;
	key = 1;
	v = bpf_map_lookup_elem(&stats, &key);
	if (v)
		*v = mx;
	return 0;
}
