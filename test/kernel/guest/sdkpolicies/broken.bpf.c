/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * broken.bpf.c - a kernel-lab fixture built with the SDK: it compiles, but
 * the verifier refuses it (a map value used without its NULL check), so the
 * lab sees the loader report the verifier's log with this file's lines and
 * leave the attached policy in place.
 */
#include "gpuext_policy.h"

GPUEXT_POLICY_ABI;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} broken_hot SEC(".maps");

SEC("struct_ops/evict_prepare")
int BPF_PROG(broken_evict_prepare, struct gpuext_evict_ctx *ectx)
{
	__u32 zero = 0;
	__u64 *hot = bpf_map_lookup_elem(&broken_hot, &zero);

	return *hot ? GPUEXT_RET_HANDLED : GPUEXT_RET_DEFAULT; /* no NULL check: refused */
}

GPUEXT_MEM_OPS(broken_ops) = {
	.evict_prepare = (void *)broken_evict_prepare,
};

GPUEXT_LICENSE;
