// Storing the map value's own address into it would leak a device pointer
// to the host.
// want: "pointer leak" at line 23
#include "probe.h"

struct {
	__uint(type, MAP_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} vals SEC(".maps");

SEC(GPUEXT_PROBE_SEC_ENTRY)
int leak_entry(struct gpuext_probe_ctx *ctx)
{
	__u32 key = 0;
	__u64 *v;

	if (gpuext_lane_id() != 0)
		return 0;
	v = bpf_map_lookup_elem(&vals, &key);
	if (v)
		*v = (__u64)v;
	return 0;
}
