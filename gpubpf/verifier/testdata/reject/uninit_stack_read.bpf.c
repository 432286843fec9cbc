// The key passed to map_lookup_elem is never written.
// want: "uninitialised stack" at line 19
#include "probe.h"

struct {
	__uint(type, MAP_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} vals SEC(".maps");

SEC(GPUEXT_PROBE_SEC_ENTRY)
int uninit_entry(struct gpuext_probe_ctx *ctx)
{
	__u32 key;
	__u64 *v;

	asm volatile("" : : "r"(&key) : "memory");
	v = bpf_map_lookup_elem(&vals, &key);
	return v ? 1 : 0;
}
