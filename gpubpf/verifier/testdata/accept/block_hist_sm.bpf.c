// Histogram of blocks per SM: thread (0,0,0) of each block counts its SM.
#include "probe.h"

#define NSM 256

struct {
	__uint(type, MAP_ARRAY);
	__uint(max_entries, NSM);
	__type(key, __u32);
	__type(value, __u64);
} blocks_per_sm SEC(".maps");

SEC(GPUEXT_PROBE_SEC_ENTRY)
int sm_hist(struct gpuext_probe_ctx *ctx)
{
	__u32 sm;
	__u64 *n;

	if (gpuext_thread_idx(0) == 0 && gpuext_thread_idx(1) == 0 && gpuext_thread_idx(2) == 0) {
		sm = (__u32)gpuext_sm_id() % NSM;
		n = bpf_map_lookup_elem(&blocks_per_sm, &sm);
		if (n)
			__sync_fetch_and_add(n, 1);
	}
	return 0;
}
