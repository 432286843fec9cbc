// Lane 0 of each warp appends one record (kernel, SM, warp, time) to a
// ring buffer at kernel exit.
#include "probe.h"

struct event {
	__u64 kernel;
	__u32 sm;
	__u32 warp;
	__u64 ns;
};

struct {
	__uint(type, MAP_RINGBUF);
	__uint(max_entries, 1 << 16);
} events SEC(".maps");

SEC(GPUEXT_PROBE_SEC_EXIT)
int trace_exit(struct gpuext_probe_ctx *ctx)
{
	struct event e;

	if (gpuext_lane_id() != 0)
		return 0;
	e.kernel = ctx->kernel_id;
	e.sm = gpuext_sm_id();
	e.warp = gpuext_warp_id();
	e.ns = gpuext_globaltimer();
	bpf_ringbuf_output(&events, &e, sizeof(e), 0);
	return 0;
}
