/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * gpu_ext_sched.h - build a scheduling policy written for gpu_ext (its
 * nv_gpu_sched_ops struct_ops and bpf_nv_gpu_* kfuncs) against gpuext's
 * scheduling ops, gpuext_sched_ops (gpuext_ops.h), from its unmodified
 * source.  docs/gpu-ext-mapping.md has the whole mapping.
 *
 * This directory (the SDK's include/compat/gpu_ext) stands in for the two
 * headers such a source includes besides libbpf's: vmlinux.h and
 * gpu_sched_set_timeslices.h both lead here.  Build with this directory
 * before the SDK's include directory, the source copied out of its tree (a
 * quoted include finds a header next to the source first):
 *
 *	clang --target=bpf -O2 -g -I$SDK/include/compat/gpu_ext -I$SDK/include \
 *		-c gpu_sched_set_timeslices.bpf.c
 *
 * What maps, and how:
 *   struct nv_gpu_sched_ops     -> struct gpuext_sched_ops (a macro: the
 *                                  kernel type is found by this name)
 *   .on_task_init / .on_bind / .on_task_destroy
 *                               -> .tsg_init / .tsg_bind / .tsg_destroy
 *                                  (macros: struct_ops members match by
 *                                  name; the programs take these names too)
 *   nv_gpu_task_init_ctx, nv_gpu_bind_ctx, nv_gpu_task_destroy_ctx
 *                               -> views of struct gpuext_tsg_ctx with
 *                                  gpu_ext's member names at gpuext's
 *                                  offsets (checked below); the gpuext
 *                                  context itself is member .gpuext
 *   bpf_nv_gpu_set_timeslice()  -> bpf_gpuext_tsg_set_timeslice(); a value
 *                                  past 32 bits becomes one the core refuses
 *   bpf_nv_gpu_set_interleave() -> bpf_gpuext_tsg_set_interleave(level + 1):
 *                                  RM's LOW/MEDIUM/HIGH (0/1/2) are gpuext's
 *                                  1/2/3 (as kmod/nvidia maps them); any
 *                                  other level is refused by the core
 *   return values               -> the same numbers: tsg_init's 1 is
 *                                  GPUEXT_RET_HANDLED (the requests stand),
 *                                  0 keeps stock; tsg_bind's 0 admits
 *   SEC(".struct_ops")          -> the loader (bpf/kernelpolicy) reads the
 *                                  legacy section as ".struct_ops.link": a
 *                                  header cannot rename a section
 *   the ABI record              -> defined here (GPUEXT_POLICY_ABI), so the
 *                                  loader accepts the object
 *
 * What does not map (a source that uses it does not build, by design):
 * on_timeslice_control and bpf_nv_gpu_override_timeslice (gpuext settles a
 * TSG's values at init), bpf_nv_gpu_reject_bind (gpuext's tsg_bind refuses
 * by returning GPUEXT_BIND_REFUSE), and the members gpuext does not carry
 * (engine_type, runlist_id, allow).  Reading differs in two places: a
 * context's interleave reads gpuext's level (RM level + 1), and
 * channel_count reads 0 (gpuext does not count channels at bind).
 *
 * gpuext differs in what runs the policy: a gpuext sched ops serves the
 * priority classes its descriptor claims, so a gpu_ext policy keyed by
 * process name decides only among the TSGs of tenants in those classes,
 * and every value it asks for is checked against the core's bounds.
 */
#ifndef GPUEXT_COMPAT_GPU_EXT_SCHED_H
#define GPUEXT_COMPAT_GPU_EXT_SCHED_H

#include <linux/types.h>
#include <linux/bpf.h>

#include "gpuext_ops.h"
#include "gpuext_kfuncs.h"

/* The ABI version record the loader checks (gpuext_policy.h's GPUEXT_POLICY_ABI). */
const volatile __u32 gpuext_policy_abi = GPUEXT_ABI_VERSION;

/* ---- the ops ------------------------------------------------------------ */

#define nv_gpu_sched_ops gpuext_sched_ops
#define on_task_init tsg_init
#define on_bind tsg_bind
#define on_task_destroy tsg_destroy

/* ---- the contexts: gpu_ext's names over struct gpuext_tsg_ctx ------------ */

struct nv_gpu_task_init_ctx {
	union {
		struct gpuext_tsg_ctx gpuext;
		struct {
			__u64 __cgroup_id;
			__u64 tsg_id;
			__u32 __tenant[4];          /* tenant_id .. cfg_interleave */
			__u32 default_timeslice;    /* timeslice_us: the driver's stock value */
			__u32 default_interleave;   /* interleave: gpuext's level (RM level + 1) */
			__u32 __requests[2];
		};
	};
};

struct nv_gpu_bind_ctx {
	union {
		struct gpuext_tsg_ctx gpuext;
		struct {
			__u64 __cgroup_id;
			__u64 tsg_id;
			__u32 __tenant[4];
			__u32 timeslice_us;         /* the value that applies */
			__u32 interleave_level;     /* gpuext's level (RM level + 1) */
			__u32 channel_count;        /* requests: always 0 at bind (bind takes none) */
			__u32 __refused;
		};
	};
};

struct nv_gpu_task_destroy_ctx {
	union {
		struct gpuext_tsg_ctx gpuext;
		struct {
			__u64 __cgroup_id;
			__u64 tsg_id;
		};
	};
};

#define GPUEXT_COMPAT_AT(type, member, gpuext_member)                              \
	_Static_assert(__builtin_offsetof(struct type, member) ==                   \
			       __builtin_offsetof(struct gpuext_tsg_ctx, gpuext_member), \
		       #type "." #member " is not gpuext_tsg_ctx." #gpuext_member)
GPUEXT_COMPAT_AT(nv_gpu_task_init_ctx, tsg_id, tsg_id);
GPUEXT_COMPAT_AT(nv_gpu_task_init_ctx, default_timeslice, timeslice_us);
GPUEXT_COMPAT_AT(nv_gpu_task_init_ctx, default_interleave, interleave);
GPUEXT_COMPAT_AT(nv_gpu_bind_ctx, tsg_id, tsg_id);
GPUEXT_COMPAT_AT(nv_gpu_bind_ctx, timeslice_us, timeslice_us);
GPUEXT_COMPAT_AT(nv_gpu_bind_ctx, interleave_level, interleave);
GPUEXT_COMPAT_AT(nv_gpu_bind_ctx, channel_count, requests);
GPUEXT_COMPAT_AT(nv_gpu_task_destroy_ctx, tsg_id, tsg_id);
_Static_assert(sizeof(struct nv_gpu_task_init_ctx) == sizeof(struct gpuext_tsg_ctx), "init view size");
_Static_assert(sizeof(struct nv_gpu_bind_ctx) == sizeof(struct gpuext_tsg_ctx), "bind view size");
#undef GPUEXT_COMPAT_AT

/* ---- constants ------------------------------------------------------------ */

#define NV_ENGINE_TYPE_GRAPHICS 0
#define NV_ENGINE_TYPE_COPY 1
#define NV_ENGINE_TYPE_NVDEC 2
#define NV_ENGINE_TYPE_NVENC 3
#define NV_ENGINE_TYPE_NVJPEG 4

/* RM's interleave levels (NVA06C_CTRL_INTERLEAVE_LEVEL_*). */
#define NV_INTERLEAVE_LEVEL_LOW 0
#define NV_INTERLEAVE_LEVEL_MEDIUM 1
#define NV_INTERLEAVE_LEVEL_HIGH 2

/* ---- the kfuncs ------------------------------------------------------------ */

static __always_inline int bpf_nv_gpu_set_timeslice(struct nv_gpu_task_init_ctx *ctx, __u64 timeslice_us)
{
	__u32 us = timeslice_us > 0xffffffffULL ? 0xffffffffU : (__u32)timeslice_us;

	return bpf_gpuext_tsg_set_timeslice((struct gpuext_tsg_ctx *)ctx, us);
}

static __always_inline int bpf_nv_gpu_set_interleave(struct nv_gpu_task_init_ctx *ctx, __u32 level)
{
	__u32 gpuext_level = level <= NV_INTERLEAVE_LEVEL_HIGH ? level + 1 : 0;

	return bpf_gpuext_tsg_set_interleave((struct gpuext_tsg_ctx *)ctx, gpuext_level);
}

void bpf_nv_gpu_reject_bind(struct nv_gpu_bind_ctx *ctx)
	__attribute__((unavailable("gpuext: return GPUEXT_BIND_REFUSE (1) from tsg_bind instead")));
int bpf_nv_gpu_override_timeslice(void *ctx, __u64 timeslice_us)
	__attribute__((unavailable("gpuext settles a TSG's timeslice at tsg_init (bpf_nv_gpu_set_timeslice)")));

#endif /* GPUEXT_COMPAT_GPU_EXT_SCHED_H */
