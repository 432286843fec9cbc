// racy_update.bpf.c - refused: every thread reads a shared GPU array entry,
// adds one and writes it back with map_update_elem; lanes that read before
// another lane's update lose it (bpftime's gpu_shared_map does this).
#include <vmlinux.h>
#include <bpf/bpf_helpers.h>

#define BPF_MAP_TYPE_GPU_ARRAY_MAP 1503

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} ru_count SEC(".maps");

SEC("kretprobe/_Z4gridPj")
int ru_exit()
{
	u32 key = 0;
	u64 *v = bpf_map_lookup_elem(&ru_count, &key);
	u64 newv = v ? *v + 1 : 1;
	bpf_map_update_elem(&ru_count, &key, &newv, BPF_ANY);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
