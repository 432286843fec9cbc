// Counts launches: thread 0 of block 0 bumps a counter once per launch.
#include "probe.h"

struct {
	__uint(type, MAP_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} launches SEC(".maps");

SEC(GPUEXT_PROBE_SEC_ENTRY)
int count_entry(struct gpuext_probe_ctx *ctx)
{
	__u32 key = 0;
	__u64 *n;

	if (gpuext_thread_linear_id() != 0 || gpuext_block_linear_id() != 0)
		return 0;
	n = bpf_map_lookup_elem(&launches, &key);
	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}
