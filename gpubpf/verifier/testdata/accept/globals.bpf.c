// Globals: a const threshold (.rodata) every thread reads, and a launch
// counter (.bss) thread 0 of block 0 bumps when the tenant is the one
// watched.
#include "probe.h"

const volatile __u32 watched_tenant = 3;
__u64 launches;

SEC(GPUEXT_PROBE_SEC_ENTRY)
int globals_entry(struct gpuext_probe_ctx *ctx)
{
	if (ctx->tenant_id != watched_tenant)
		return 0;
	if (gpuext_thread_linear_id() == 0 && gpuext_block_linear_id() == 0)
		__sync_fetch_and_add(&launches, 1);
	return 0;
}
