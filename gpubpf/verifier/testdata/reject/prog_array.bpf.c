// A program array (tail calls) is not a device map.
// want: "map \"jumps\" has type ProgramArray" at line 17
#include "probe.h"

struct {
	__uint(type, MAP_PROG_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u32);
} jumps SEC(".maps");

SEC(GPUEXT_PROBE_SEC_ENTRY)
int tail_entry(struct gpuext_probe_ctx *ctx)
{
	__u32 key = 0;

	return bpf_map_lookup_elem(&jumps, &key) != 0;
}
