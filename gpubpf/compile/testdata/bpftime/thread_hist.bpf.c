// thread_hist.bpf.c - gpuext's own program in bpftime's style (a per-thread
// histogram, as bpftime's threadhist): every thread counts its own exits in
// its own row of a per-thread array, with a plain += and no leader.
#include <vmlinux.h>
#include <bpf/bpf_helpers.h>

#define BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP 1502

struct {
	__uint(type, BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} th_count SEC(".maps");

SEC("kretprobe/_Z4gridPj")
int th_exit()
{
	u32 key = 0;
	u64 *cnt = bpf_map_lookup_elem(&th_count, &key);
	if (cnt)
		*cnt += 1;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
