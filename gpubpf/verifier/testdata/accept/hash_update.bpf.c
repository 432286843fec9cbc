// Records which tenant launched each kernel: every thread writes the same
// (kernel id -> tenant id) entry, which is warp-uniform and idempotent, so
// no leader guard is needed.
#include "probe.h"

struct launch {
	__u32 tenant;
	__u32 attach;
};

struct {
	__uint(type, MAP_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct launch);
} kernels SEC(".maps");

SEC(GPUEXT_PROBE_SEC_ENTRY)
int record_entry(struct gpuext_probe_ctx *ctx)
{
	__u64 key = ctx->kernel_id;
	struct launch l = {.tenant = ctx->tenant_id, .attach = ctx->attach};

	bpf_map_update_elem(&kernels, &key, &l, 0);
	return 0;
}
