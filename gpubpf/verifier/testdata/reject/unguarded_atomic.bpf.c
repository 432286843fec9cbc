// Every thread adds 1: the count would be threads, not warps, and 32
// atomics per warp. It needs a lane_id() == 0 guard.
// want: "atomic add on map \"warps\" by every lane" at line 21
#include "probe.h"

struct {
	__uint(type, MAP_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} warps SEC(".maps");

SEC(GPUEXT_PROBE_SEC_ENTRY)
int atomic_entry(struct gpuext_probe_ctx *ctx)
{
	__u32 key = 0;
	__u64 *n;

	n = bpf_map_lookup_elem(&warps, &key);
	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}
