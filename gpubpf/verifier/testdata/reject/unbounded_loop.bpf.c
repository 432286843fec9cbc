// A loop bounded only by a 64-bit value the verifier cannot bound.
// want: "unbounded loop" at line 18
#include "probe.h"

struct {
	__uint(type, MAP_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} sums SEC(".maps");

SEC(GPUEXT_PROBE_SEC_ENTRY)
int sum_entry(struct gpuext_probe_ctx *ctx)
{
	__u32 key = 0;
	__u64 s = 0, i, *v;

	for (i = 0; i < ctx->kernel_id; i++)
		s = s * 7 + (s >> 3) + 1;
	if (gpuext_lane_id() != 0)
		return 0;
	v = bpf_map_lookup_elem(&sums, &key);
	if (v)
		*v = s;
	return 0;
}
