/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/* fx_sched.bpf.c - test fixture: a scheduling policy claiming latency-critical. */
#include "gpuext_policy.h"

GPUEXT_POLICY_ABI;

SEC("struct_ops/tsg_init")
int BPF_PROG(fx_tsg_init, struct gpuext_tsg_ctx *tctx)
{
	return GPUEXT_RET_DEFAULT;
}

GPUEXT_SCHED_OPS(fx_sched_ops) = {
	.tsg_init = (void *)fx_tsg_init,
	.classes = GPUEXT_SCHED_CLASS(GPUEXT_PRIO_LATENCY_CRITICAL),
};

GPUEXT_LICENSE;
