/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * gpuext_ops.h - the memory struct_ops type that gpuext.ko registers.
 *
 * Shared by the kernel module and the BPF policies (bpf/kernelpolicy): it holds
 * function pointers, so it lives apart from gpuext_abi.h, whose types Go
 * reads through bpf2go.  Contexts and return codes are in gpuext_abi.h.
 */
#ifndef GPUEXT_OPS_H
#define GPUEXT_OPS_H

#include "gpuext_abi.h"

/*
 * A named memory policy.  Several may be attached at once; a tenant's config
 * (eviction_policy) names the one that shapes its GPU contexts.
 * Every hook returns enum gpuext_hook_ret, or a negative errno; anything but
 * GPUEXT_RET_HANDLED keeps the stock behaviour.
 */
struct gpuext_mem_ops {
	int (*prefetch)(struct gpuext_prefetch_ctx *ctx);
	int (*evict_prepare)(struct gpuext_evict_ctx *ctx);
	char name[GPUEXT_OPS_NAME_LEN];
	/* ==== memory: appended ==== */
	/* Only in the system ops (debugfs gpuext/system): which context gives up a chunk. */
	int (*evict_arbitrate)(struct gpuext_arbitrate_ctx *ctx);
	/* Notifications to the tenant's eviction ops; the return value is ignored. */
	int (*block_activate)(struct gpuext_block_ctx *ctx);
	int (*block_access)(struct gpuext_block_ctx *ctx);
	/* ==== appended: the tenant's prefetch ops, at each node of the prefetch tree ==== */
	int (*prefetch_node)(struct gpuext_prefetch_node_ctx *ctx);
};


/* ==== SCHEDULING ============================================================ */

/*
 * A named scheduling policy.  Several may be attached at once; each claims
 * the priority classes it serves (classes, GPUEXT_SCHED_CLASS bits; two
 * attached ops never share a class), and a tenant's config priority_class
 * selects the ops for its TSGs.
 *   tsg_init:    ask for a timeslice/interleave; GPUEXT_RET_HANDLED keeps
 *                the requests unless one was refused, anything else = stock;
 *   tsg_bind:    admit or refuse a new TSG (enum gpuext_bind_ret);
 *   tsg_destroy: the TSG is gone (release per-TSG policy state, keyed by
 *                tsg_id); delivered to every attached sched ops, since the
 *                tenant's class may have changed since bind.
 */
struct gpuext_sched_ops {
	int (*tsg_init)(struct gpuext_tsg_ctx *ctx);
	int (*tsg_bind)(struct gpuext_tsg_ctx *ctx);
	void (*tsg_destroy)(struct gpuext_tsg_ctx *ctx);
	__u32 classes;
	char name[GPUEXT_OPS_NAME_LEN];
	/* ==== appended ==== */
	/* The TSG has work to run: ask to preempt less urgent TSGs (bpf_gpuext_tsg_preempt). */
	int (*tsg_submit)(struct gpuext_tsg_submit_ctx *ctx);
};

#endif /* GPUEXT_OPS_H */
