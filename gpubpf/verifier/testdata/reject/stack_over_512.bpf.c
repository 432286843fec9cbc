// A store 600 bytes below a stack buffer: outside the 512-byte stack.
// want: "outside [-512, 0)" at line 14
#include "probe.h"

SEC(GPUEXT_PROBE_SEC_ENTRY)
int deep_entry(struct gpuext_probe_ctx *ctx)
{
	char buf[8];
	volatile char *p = buf;

	buf[0] = 1;
	/* hide p's origin from clang so it keeps the access */
	asm volatile("" : "+r"(p));
	p[-600] = 2;
	return buf[0];
}
