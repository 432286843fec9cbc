// add_only.bpf.c - which bpftime arrays get a copy per warp slot
// (ptx.StripeArrays): ao_added is only added to; ao_read's sum is read
// after the add; ao_fetched's old value is read. Only the first may be
// striped: a slot's value is not the map's.
#include <vmlinux.h>
#include <bpf/bpf_helpers.h>

#define BPF_MAP_TYPE_GPU_ARRAY_MAP 1503

#define ARRAY(name)                                    \
	struct {                                       \
		__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP); \
		__uint(max_entries, 4);                \
		__type(key, u32);                      \
		__type(value, u64);                    \
	} name SEC(".maps")

ARRAY(ao_added);
ARRAY(ao_read);
ARRAY(ao_fetched);
ARRAY(ao_flag);

SEC("kprobe/_Z4gridPj")
int ao_entry(struct gpuext_probe_ctx *ctx)
{
	u32 k = 1;
	u64 *a = bpf_map_lookup_elem(&ao_added, &k);
	u64 *r = bpf_map_lookup_elem(&ao_read, &k);
	u64 *f = bpf_map_lookup_elem(&ao_fetched, &k);
	u64 *flag = bpf_map_lookup_elem(&ao_flag, &k);

	if (!a || !r || !f || !flag)
		return 0;
	*a += 1;
	*r += 1;
	if (*r == 3)
		__sync_fetch_and_add(flag, 1);
	if (__sync_fetch_and_add(f, 1) == 5)
		__sync_fetch_and_add(flag, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
