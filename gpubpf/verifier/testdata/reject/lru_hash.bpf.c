// An LRU hash has no device implementation.
// want: "device maps are Array, Hash, PerCPUArray or RingBuf" at line 19
#include "probe.h"

struct {
	__uint(type, MAP_LRU_HASH);
	__uint(max_entries, 64);
	__type(key, __u64);
	__type(value, __u64);
} recent SEC(".maps");

SEC(GPUEXT_PROBE_SEC_ENTRY)
int lru_entry(struct gpuext_probe_ctx *ctx)
{
	__u64 key = ctx->kernel_id;
	__u64 *v;

	if (gpuext_lane_id() == 0) {
		v = bpf_map_lookup_elem(&recent, &key);
		if (v)
			*v = 1;
	}
	return 0;
}
