// The probe context is read-only: the dispatch builds it for every thread.
// want: "write to ctx" at line 8
#include "probe.h"

SEC(GPUEXT_PROBE_SEC_ENTRY)
int ctxw_entry(struct gpuext_probe_ctx *ctx)
{
	ctx->tenant_id = 7;
	return 0;
}
