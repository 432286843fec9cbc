// bpf_trace_printk writes to the host's trace pipe: a GPU thread cannot.
// want: "helper bpf_trace_printk (6) needs a host round trip; not allowed at kernel_entry" at line 10
#include "probe.h"

SEC(GPUEXT_PROBE_SEC_ENTRY)
int printk_entry(struct gpuext_probe_ctx *ctx)
{
	char fmt[] = "hi\n";

	bpf_trace_printk(fmt, sizeof(fmt));
	return 0;
}
