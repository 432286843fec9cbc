//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * sched_priority.bpf.c - timeslice and interleave by priority class.
 * Sched ops "sched_priority", claiming the latency-critical and best-effort
 * classes (standard tenants keep the driver's stock values):
 *   latency-critical: a short timeslice and a high interleave level, so its
 *                     TSGs come round often and briefly;
 *   best-effort:      a long timeslice at the lowest interleave level.
 * A tenant config's timeslice_us / interleave, when set, replace the class
 * values; the core refuses values outside its bounds and keeps stock then.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "gpuext_ops.h"
#include "gpuext_kfuncs.h"

#define LC_TIMESLICE_US 500
#define LC_INTERLEAVE 32
#define BE_TIMESLICE_US 8000
#define BE_INTERLEAVE 1

SEC("struct_ops/tsg_init")
int BPF_PROG(sched_priority_tsg_init, struct gpuext_tsg_ctx *tctx)
{
	__u32 ts, il;

	switch (tctx->priority_class) {
	case GPUEXT_PRIO_LATENCY_CRITICAL:
		ts = LC_TIMESLICE_US;
		il = LC_INTERLEAVE;
		break;
	case GPUEXT_PRIO_BEST_EFFORT:
		ts = BE_TIMESLICE_US;
		il = BE_INTERLEAVE;
		break;
	default:
		return GPUEXT_RET_DEFAULT;
	}
	if (tctx->cfg_timeslice_us)
		ts = tctx->cfg_timeslice_us;
	if (tctx->cfg_interleave)
		il = tctx->cfg_interleave;
	bpf_gpuext_tsg_set_timeslice(tctx, ts);
	bpf_gpuext_tsg_set_interleave(tctx, il);
	return GPUEXT_RET_HANDLED;
}

SEC(".struct_ops.link")
struct gpuext_sched_ops sched_priority_ops = {
	.tsg_init = (void *)sched_priority_tsg_init,
	.classes = GPUEXT_SCHED_CLASS(GPUEXT_PRIO_LATENCY_CRITICAL) |
		   GPUEXT_SCHED_CLASS(GPUEXT_PRIO_BEST_EFFORT),
	.name = "sched_priority",
};

char LICENSE[] SEC("license") = "GPL";
