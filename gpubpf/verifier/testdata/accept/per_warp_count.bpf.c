// Counts warps: lane 0 of every warp bumps its warp's slot of a per-warp
// array (PERCPU_ARRAY on the host); the host sums the slots.
#include "probe.h"

struct {
	__uint(type, MAP_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} warps SEC(".maps");

SEC(GPUEXT_PROBE_SEC_ENTRY)
int warp_entry(struct gpuext_probe_ctx *ctx)
{
	__u32 key = 0;
	__u64 *n;

	if (gpuext_lane_id() == 0) {
		n = bpf_map_lookup_elem(&warps, &key);
		if (n)
			*n += 1;
	}
	return 0;
}
