// bt_types.bpf.c - a probe directory test: bpftime's GPU map types the
// bpftime-style test programs do not use (GPU hash 1501, kernel-shared
// array 1504, per-thread host array 1512, host array 1513), each with a
// view, written by every thread at kernel exit.
#include <vmlinux.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, 1501);
	__uint(max_entries, 64);
	__type(key, u64);
	__type(value, u64);
} bt_hash SEC(".maps");

struct {
	__uint(type, 1504);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} bt_shared SEC(".maps");

struct {
	__uint(type, 1512);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
	__uint(map_extra, 4096);
} bt_rows SEC(".maps");

struct {
	__uint(type, 1513);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} bt_host SEC(".maps");

struct {
	__uint(type, 1503);
	__uint(max_entries, 4);
	__type(key, u32);
	__type(value, u64);
} bt_array SEC(".maps");

static const u64 (*bpf_get_block_idx)(u64 *x, u64 *y, u64 *z) = (void *)503;

SEC("kretprobe/_Z4gridPj")
int bt_exit()
{
	u64 x, y, z, one = 1;
	u32 key = 0;

	bpf_get_block_idx(&x, &y, &z);
	u64 *n = bpf_map_lookup_elem(&bt_hash, &x);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&bt_hash, &x, &one, BPF_NOEXIST);
	u64 *s = bpf_map_lookup_elem(&bt_shared, &key);
	if (s)
		__sync_fetch_and_add(s, 1);
	u64 *r = bpf_map_lookup_elem(&bt_rows, &key);
	if (r)
		*r += 1;
	u64 *h = bpf_map_lookup_elem(&bt_host, &key);
	if (h)
		__sync_fetch_and_add(h, 1);
	u64 *a = bpf_map_lookup_elem(&bt_array, &key);
	if (a)
		__sync_fetch_and_add(a, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
