/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/* fx_abi99.bpf.c - test fixture: claims to be built for ABI version 99. */
#include "gpuext_policy.h"

const volatile __u32 gpuext_policy_abi = 99;

SEC("struct_ops/evict_prepare")
int BPF_PROG(fx_evict, struct gpuext_evict_ctx *ectx)
{
	return GPUEXT_RET_DEFAULT;
}

GPUEXT_MEM_OPS(fx_abi99_ops) = {
	.evict_prepare = (void *)fx_evict,
};

GPUEXT_LICENSE;
