// call_counter.bpf.c - gpuext's own program in bpftime's style (as bpftime's
// cuda-counter): at entry every thread stores its block's start time (the
// last writer wins) and the process's pid, and counts itself with an atomic add; at exit every thread adds its time since the block's start with a
// plain += (one atomic add on the device).
#include <vmlinux.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, u64);
	__type(value, u64);
} cc_start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} cc_totals SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} cc_pid SEC(".maps");

static const u64 (*bpf_get_globaltimer)(void) = (void *)502;
static const u64 (*bpf_get_block_idx)(u64 *x, u64 *y, u64 *z) = (void *)503;

SEC("kprobe/_Z4gridPj")
int cc_entry()
{
	u64 ts = bpf_get_globaltimer();
	u64 x, y, z;
	u32 key = 0;
	u64 pid = bpf_get_current_pid_tgid() >> 32;

	bpf_get_block_idx(&x, &y, &z);
	bpf_map_update_elem(&cc_pid, &key, &pid, BPF_ANY);
	bpf_map_update_elem(&cc_start, &x, &ts, BPF_ANY);
	u64 *cnt = bpf_map_lookup_elem(&cc_totals, &key);
	if (cnt)
		__atomic_add_fetch(cnt, 1, __ATOMIC_SEQ_CST);
	return 0;
}

SEC("kretprobe/_Z4gridPj")
int cc_exit()
{
	u64 x, y, z;
	u32 key = 1;

	bpf_get_block_idx(&x, &y, &z);
	u64 *tsp = bpf_map_lookup_elem(&cc_start, &x);
	if (!tsp)
		return 0;
	u64 delta = bpf_get_globaltimer() - *tsp;
	u64 *total = bpf_map_lookup_elem(&cc_totals, &key);
	if (total)
		*total += delta;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
