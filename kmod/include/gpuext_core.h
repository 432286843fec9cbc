/* SPDX-License-Identifier: GPL-2.0 */
/*
 * gpuext_core.h - the call-site API that gpuext.ko exports to GPU drivers
 * (the simulated driver gpusim.ko, and the NVIDIA patch series).
 *
 * A driver creates one gpuext_ctx per GPU context (UVM va_space, TSG) from
 * the creating task; the core records that task's cgroup there.  At each
 * decision point the driver fills a hook context (gpuext_abi.h) and calls
 * the matching gpuext_*() function, which runs the memory ops that the
 * tenant of that cgroup names, or leaves the stock behaviour.
 */
#ifndef GPUEXT_CORE_H
#define GPUEXT_CORE_H

#include <linux/types.h>
#include "gpuext_abi.h"

struct gpuext_ctx;

/* Attribute a new GPU context to current's cgroup (v2). */
struct gpuext_ctx *gpuext_ctx_create(void);
void gpuext_ctx_destroy(struct gpuext_ctx *gctx);
u64 gpuext_ctx_cgroup_id(const struct gpuext_ctx *gctx);

/*
 * Run the tenant's evict_prepare on ectx->cand[0..nr_candidates).
 * Returns 1 when ectx->cand holds the policy's order, 0 when the driver must
 * apply its stock order (no policy, policy declined, erred or was refused;
 * cand is then unchanged), or a negative errno for a malformed ectx.
 * Copies the name of the ops that ran (or "") into ops_name when non-NULL.
 * May sleep (it allocates with GFP_KERNEL): never call it under a spinlock
 * or with preemption disabled (kmod/nvidia 0004 drops pmm->list_lock for it).
 */
int gpuext_evict_prepare(struct gpuext_ctx *gctx, struct gpuext_evict_ctx *ectx,
			 char ops_name[GPUEXT_OPS_NAME_LEN]);

/*
 * Run the tenant's prefetch on pctx.  Returns 1 when
 * [pctx->result_first, pctx->result_last] is the policy's region, 0 for stock.
 */
int gpuext_prefetch(struct gpuext_ctx *gctx, struct gpuext_prefetch_ctx *pctx);

/*
 * gpuext_prefetch() for a driver that can show which pages of the VA block
 * are resident: bit p of resident is page p (0..region_last).  Policies
 * read it through bpf_gpuext_prefetch_resident() during the call only.
 */
int gpuext_prefetch_resident(struct gpuext_ctx *gctx, struct gpuext_prefetch_ctx *pctx,
			     const unsigned long *resident);

/*
 * Device memory is full: run the system ops' evict_arbitrate over
 * actx->cand[0..nr_candidates) (the core fills tenant_id and quota_bytes).
 * Returns 1 when actx->picked is the context to evict from, 0 for the
 * driver's stock choice (no system ops, declined, erred or refused), or a
 * negative errno for a malformed actx.
 */
int gpuext_evict_arbitrate(struct gpuext_arbitrate_ctx *actx);

/*
 * Notify the tenant's eviction ops that a VA block got a root chunk
 * (activate) or was touched while holding one (access).  The core fills
 * cgroup_id and tenant_id.
 */
void gpuext_block_activate(struct gpuext_ctx *gctx, struct gpuext_block_ctx *bctx);
void gpuext_block_access(struct gpuext_ctx *gctx, struct gpuext_block_ctx *bctx);

/*
 * Ask the tenant's prefetch ops about one node of the prefetch tree (the
 * driver fills va_block, fault_page, node_*, level, counter, region_*).
 * Returns 1 when nctx->take is the policy's answer, 0 for the stock rule,
 * or -EINVAL for a malformed node.
 */
int gpuext_prefetch_node(struct gpuext_ctx *gctx, struct gpuext_prefetch_node_ctx *nctx);

/*
 * Proactive migration (bpf_gpuext_migrate_range): a driver that can migrate
 * a range outside a fault registers how.  migrate() may sleep and takes the
 * driver's own locks; it is never called after gpuext_ctx_destroy()
 * returns, so a driver must not hold a lock that migrate() takes around
 * gpuext_ctx_destroy().
 */
struct gpuext_migrate_ops {
	/* Make pages [first, last] of va_block resident; pages migrated or -errno. */
	int (*migrate)(void *priv, u64 va_block, u32 first, u32 last);
	u64 nr_blocks;       /* va_block < nr_blocks */
	u32 pages_per_block; /* last < pages_per_block (at most GPUEXT_MIGRATE_MAX_PAGES) */
};
int gpuext_ctx_set_migrate(struct gpuext_ctx *gctx, const struct gpuext_migrate_ops *ops, void *priv);
u64 gpuext_ctx_id(const struct gpuext_ctx *gctx);

/* ==== SCHEDULING ============================================================ */

/*
 * A driver keeps one gpuext_tsg_ctx per TSG for the TSG's lifetime.
 * gpuext_tsg_init: fill tctx->timeslice_us/interleave with the stock values
 * first; on return they hold what applies.  Returns 1 when the values are
 * the policy's, 0 for stock.  Copies the ops name (or "") into ops_name.
 * gpuext_tsg_bind: 0 to admit, -EPERM when the policy refused the TSG.
 * gpuext_tsg_destroy: call once per initialised TSG, bound or not; every
 * attached sched ops hears of it.
 */
int gpuext_tsg_init(struct gpuext_ctx *gctx, struct gpuext_tsg_ctx *tctx,
		    char ops_name[GPUEXT_OPS_NAME_LEN]);
int gpuext_tsg_bind(struct gpuext_ctx *gctx, struct gpuext_tsg_ctx *tctx);
void gpuext_tsg_destroy(struct gpuext_ctx *gctx, struct gpuext_tsg_ctx *tctx);

/*
 * The TSG tctx has work to run.  The core fills sctx and runs the tsg_submit
 * of the ops that claim the tenant's class.  Returns how many TSGs the
 * driver must preempt now (sctx->preempt[0..n)), 0 when none or when the
 * policy declined, erred or asked for something refused.
 */
int gpuext_tsg_submit(struct gpuext_ctx *gctx, struct gpuext_tsg_ctx *tctx,
		      struct gpuext_tsg_submit_ctx *sctx);

#endif /* GPUEXT_CORE_H */
