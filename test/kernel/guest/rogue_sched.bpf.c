//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * rogue_sched.bpf.c - a test-only sched policy that misbehaves: tsg_init
 * makes a valid request and then returns an error, tsg_bind answers a value
 * that is neither admit nor refuse.  The core must keep the stock values,
 * admit the TSG and count both errors.  It claims the standard class.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "gpuext_ops.h"

extern int bpf_gpuext_tsg_set_timeslice(struct gpuext_tsg_ctx *ctx, __u32 us) __ksym;

SEC("struct_ops/tsg_init")
int BPF_PROG(rogue_sched_tsg_init, struct gpuext_tsg_ctx *tctx)
{
	bpf_gpuext_tsg_set_timeslice(tctx, 5000);
	return -22;
}

SEC("struct_ops/tsg_bind")
int BPF_PROG(rogue_sched_tsg_bind, struct gpuext_tsg_ctx *tctx)
{
	return 7;
}

SEC(".struct_ops.link")
struct gpuext_sched_ops rogue_sched_ops = {
	.tsg_init = (void *)rogue_sched_tsg_init,
	.tsg_bind = (void *)rogue_sched_tsg_bind,
	.classes = GPUEXT_SCHED_CLASS(GPUEXT_PRIO_STANDARD),
	.name = "rogue_sched",
};

char LICENSE[] SEC("license") = "GPL";
