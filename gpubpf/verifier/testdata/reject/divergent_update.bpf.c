// Only thread x == 5 of each block updates: not a leader guard (x == 5
// picks one lane of one warp per row, and the branch is divergent).
// want: "map_update_elem on map \"seen\" under divergent control" at line 20
#include "probe.h"

struct {
	__uint(type, MAP_HASH);
	__uint(max_entries, 64);
	__type(key, __u64);
	__type(value, __u64);
} seen SEC(".maps");

SEC(GPUEXT_PROBE_SEC_ENTRY)
int div_entry(struct gpuext_probe_ctx *ctx)
{
	__u64 key = ctx->kernel_id;
	__u64 one = 1;

	if (gpuext_thread_idx(0) == 5)
		bpf_map_update_elem(&seen, &key, &one, 0);
	return 0;
}
