// own_slot.bpf.c - gpuext's flavour, no leader guard: every thread stores
// into the entry of an array whose key is 2*gpuext_global_thread_id()+1 (an
// injective function of the thread's id in the launch: no two threads
// share an entry), and, refused, into the entry gpuext_thread_idx(0) names
// (threads of different blocks share it).
#include <gpuext_probe.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} os_slots SEC(".maps");

SEC("gpuext/kernel_exit")
int os_own(void *ctx)
{
	__u64 g = gpuext_global_thread_id();
	if (g >= 2000)
		return 0;
	__u32 key = g * 2 + 1;
	__u64 *v = bpf_map_lookup_elem(&os_slots, &key);
	if (v)
		*v += gpuext_globaltimer() & 0xff;
	return 0;
}

SEC("gpuext/kernel_entry")
int os_shared(void *ctx)
{
	__u32 key = gpuext_thread_idx(0);
	__u64 *v = bpf_map_lookup_elem(&os_slots, &key);
	if (v)
		*v = gpuext_globaltimer();
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
