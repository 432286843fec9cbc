// The index is masked to 0..15 but the value holds 8 counters.
// want: "out of bounds" at line 26
#include "probe.h"

struct counters {
	__u64 c[8];
};

struct {
	__uint(type, MAP_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct counters);
} vals SEC(".maps");

SEC(GPUEXT_PROBE_SEC_ENTRY)
int oob_entry(struct gpuext_probe_ctx *ctx)
{
	__u32 key = 0, idx = ctx->tenant_id & 15;
	struct counters *v;

	if (gpuext_lane_id() != 0)
		return 0;
	v = bpf_map_lookup_elem(&vals, &key);
	if (v)
		v->c[idx] = 1;
	return 0;
}
