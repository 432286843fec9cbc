/* perthread.c - the per-thread map against the kernel's array: the kernel
 * runs it with rows and recs as BPF_MAP_TYPE_ARRAY; the device with both
 * as gpuext's per-thread map (TestPerThreadMapAgainstKernelArray), as
 * thread 0, whose row is what the kernel's array is to the one program it
 * runs. Keys, flags and values come from the context: in-range and
 * out-of-range keys, every update flag and a bad one, plain and atomic
 * writes through a looked-up value, an update of a struct value. */
#include "io.h"

struct rec {
	__u64 a;
	__u32 b;
	__u32 c;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} rows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, struct rec);
} recs SEC(".maps");

SEC("syscall")
int prog(struct io *c)
{
	__u64 in0 = c->in[0], in1 = c->in[1];

#pragma unroll
	for (__u32 i = 0; i < 6; i++) {
		__u32 k = (in0 >> (i * 4)) & 15; /* 8..15: no such entry */
		__u64 *v = bpf_map_lookup_elem(&rows, &k);
		if (!v) {
			c->out[i] = 1000 + k;
			continue;
		}
		if (i & 1)
			__sync_fetch_and_add(v, i + (in1 & 0xff));
		else
			*v = *v * 3 + i;
		c->out[i] = *v;
	}
	__u32 uk = (in1 >> 8) & 15;
	__u64 nv = c->in[2];
	c->out[6] = bpf_map_update_elem(&rows, &uk, &nv, (in1 >> 12) & 3); /* 3: a bad flag */
	struct rec r = {c->in[3], (__u32)c->in[4], (__u32)(c->in[4] >> 32)};
	__u32 rk = (in1 >> 16) & 7; /* 4..7: no such entry */
	c->out[7] = bpf_map_update_elem(&recs, &rk, &r, (in1 >> 20) & 3);
	struct rec *p = bpf_map_lookup_elem(&recs, &rk);
	if (p) {
		__sync_fetch_and_add(&p->a, 1);
		p->c ^= 0x5a5a;
		c->out[8] = p->a + p->b + p->c;
	} else {
		c->out[8] = 77;
	}
	__u32 k0 = (in1 >> 24) & 7;
	__u64 *z = bpf_map_lookup_elem(&rows, &k0);
	c->out[9] = z ? __sync_val_compare_and_swap(z, c->in[5], 42) : 99;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
