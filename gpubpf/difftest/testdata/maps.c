/* maps.c - BTF-defined array and hash maps: a bounded loop of lookups
 * with atomic adds, insert-or-update of a struct value, compare-and-swap,
 * delete; global data in .bss and .rodata. */
#include "io.h"

struct val {
	__u64 n;
	__u32 last;
	__u32 flags;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u64);
	__type(value, struct val);
} table SEC(".maps");

/* Global data: .bss and .rodata maps, reached by direct value loads. */
__u64 calls = 0;
volatile const __u64 bias = 5;

SEC("syscall")
int prog(struct io *c)
{
	__u64 in0 = c->in[0];
	__sync_fetch_and_add(&calls, 1);
#pragma nounroll
	for (__u32 i = 0; i < 8; i++) {
		__u32 k = (in0 >> (i * 4)) & 7;
		__u64 *v = bpf_map_lookup_elem(&counts, &k);
		if (v)
			__sync_fetch_and_add(v, i + 1);
	}
	for (__u64 r = 0; r < 3; r++) {
		__u64 key = (c->in[1] >> (r * 8)) & 3;
		struct val *p = bpf_map_lookup_elem(&table, &key);
		if (!p) {
			struct val nv = {1, (__u32)c->in[2], (__u32)r};
			c->out[r] = bpf_map_update_elem(&table, &key, &nv, BPF_NOEXIST);
		} else {
			__sync_fetch_and_add(&p->n, 1);
			p->last = (__u32)c->in[2] + (__u32)r;
			__sync_fetch_and_or(&p->flags, 1u << r);
		}
	}
	__u32 k0 = (__u32)c->in[3] & 7;
	__u64 *z = bpf_map_lookup_elem(&counts, &k0);
	c->out[4] = z ? __sync_val_compare_and_swap(z, c->in[4], 42) : 99;
	__u64 dk = 2;
	c->out[5] = bpf_map_delete_elem(&table, &dk);
	c->out[6] = bpf_map_delete_elem(&table, &dk);
	c->out[7] = calls * 1000 + bias;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
