// thread_upd.bpf.c - gpuext's own program in bpftime's style: every thread
// writes its own row of a per-thread array with bpf_map_update_elem, and
// once more with flags the update refuses; a GPU array counts the refusals
// by kind (-E2BIG: the thread has no row; -EINVAL: the bad flags).
#include <vmlinux.h>
#include <bpf/bpf_helpers.h>

#define BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP 1502
#define BPF_MAP_TYPE_GPU_ARRAY_MAP 1503

struct {
	__uint(type, BPF_MAP_TYPE_PERGPUTD_ARRAY_MAP);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} tu_rows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_GPU_ARRAY_MAP);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} tu_refused SEC(".maps");

SEC("kretprobe/_Z4gridPj")
int tu_exit()
{
	u32 key = 0, kind;
	u64 v = 7;
	long r = bpf_map_update_elem(&tu_rows, &key, &v, BPF_ANY);
	long bad = bpf_map_update_elem(&tu_rows, &key, &v, 9);
	u64 *n;

	if (r == -7) { /* -E2BIG */
		kind = 0;
		n = bpf_map_lookup_elem(&tu_refused, &kind);
		if (n)
			__sync_fetch_and_add(n, 1);
	}
	if (bad == -22) { /* -EINVAL */
		kind = 1;
		n = bpf_map_lookup_elem(&tu_refused, &kind);
		if (n)
			__sync_fetch_and_add(n, 1);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
