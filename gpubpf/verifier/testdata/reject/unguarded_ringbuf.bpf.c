// Every thread appends a record: one per thread instead of one per warp.
// want: "ringbuf_output to map \"events\" by every lane" at line 22
#include "probe.h"

struct event {
	__u64 kernel;
	__u64 ns;
};

struct {
	__uint(type, MAP_RINGBUF);
	__uint(max_entries, 1 << 16);
} events SEC(".maps");

SEC(GPUEXT_PROBE_SEC_EXIT)
int ring_exit(struct gpuext_probe_ctx *ctx)
{
	struct event e;

	e.kernel = ctx->kernel_id;
	e.ns = ctx->launch_ns;
	bpf_ringbuf_output(&events, &e, sizeof(e), 0);
	return 0;
}
