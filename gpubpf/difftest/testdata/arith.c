/* arith.c - integer arithmetic as clang lowers it: unsigned division and
 * modulo, arithmetic shifts, narrow sign extension, byte swaps, a table in
 * .rodata and a function call. */
#include "io.h"

static const __u64 divisors[4] = {3, 7, 0xffffffff, 1ull << 40};

__attribute__((noinline)) static __u64 mix(__u64 a, __u64 b)
{
	return (a * 31) ^ (b >> 3) ^ (a << (b & 63));
}

SEC("syscall")
int prog(struct io *c)
{
	__u64 a = c->in[0], b = c->in[1];
	__s64 sa = (__s64)c->in[2];
	__s32 s32 = (__s32)c->in[3];
	__u32 u32 = (__u32)c->in[4];

	c->out[0] = a / (b | 1);
	c->out[1] = a % (b | 1);
	c->out[2] = sa >> (b & 63);
	c->out[3] = (__s64)s32 * 3;
	c->out[4] = u32 << (a & 31);
	c->out[5] = __builtin_bswap64(a);
	c->out[6] = __builtin_bswap32(u32) ^ __builtin_bswap16((__u16)b);
	c->out[7] = (__s64)(__s8)a + (__s16)b + (__s32)u32;
#pragma unroll
	for (int i = 0; i < 4; i++)
		c->out[8 + i] = a / divisors[i] + (u32 % (__u32)divisors[i] ? 1 : 0);
	c->out[12] = mix(a, b);
	c->out[13] = (__u32)a * (__u32)b + (u32 >> 5);
	c->out[14] = (s32 < 0 ? -s32 : s32) | ((__u64)(sa < -5) << 32);
	c->out[15] = (__u32)(a >> 32) - (__u32)a;
	return (int)(a ^ b ^ (a >> 32));
}

char LICENSE[] SEC("license") = "GPL";
