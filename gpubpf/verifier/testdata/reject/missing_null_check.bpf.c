// The map_lookup_elem result is used without checking it against NULL.
// want: "may be null" at line 21
#include "probe.h"

struct {
	__uint(type, MAP_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} vals SEC(".maps");

SEC(GPUEXT_PROBE_SEC_ENTRY)
int nonull_entry(struct gpuext_probe_ctx *ctx)
{
	__u32 key = 0;
	__u64 *v;

	if (gpuext_lane_id() != 0)
		return 0;
	v = bpf_map_lookup_elem(&vals, &key);
	*v = ctx->kernel_id;
	return 0;
}
