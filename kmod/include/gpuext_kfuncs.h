/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * gpuext_kfuncs.h - the kfuncs the gpuext core (kmod/gpuext) offers to its
 * struct_ops policies, as BPF programs declare them.  Built-in policies
 * (bpf/kernelpolicy) and SDK policies (docs/write-a-policy.md) include this
 * one list.  Reads never count as requests; every request is checked by the
 * core (bounds, the caller's own context), and a refused one keeps the
 * driver's stock behaviour for that call.
 */
#ifndef GPUEXT_KFUNCS_H
#define GPUEXT_KFUNCS_H

#include "gpuext_abi.h"

#ifndef __ksym
#define __ksym __attribute__((section(".ksyms")))
#endif

/* evict_prepare: read candidate idx (-ENOENT past the last: the end of the list). */
extern int bpf_gpuext_evict_chunk(struct gpuext_evict_ctx *ctx, __u32 idx,
				  struct gpuext_chunk_info *info) __ksym;
/* evict_prepare: request that candidate idx be evicted before all others. */
extern int bpf_gpuext_evict_move_to_front(struct gpuext_evict_ctx *ctx, __u32 idx) __ksym;

/* evict_prepare: the tenant config's eviction_param for this context (0: none). */
extern __u64 bpf_gpuext_evict_param(struct gpuext_evict_ctx *ctx) __ksym;

/* prefetch: request [first, last]; it must hold the faulting page and lie in the allowed region. */
extern int bpf_gpuext_prefetch_set_region(struct gpuext_prefetch_ctx *ctx, __u32 first,
					  __u32 last) __ksym;
/* prefetch: resident pages in [first, last] of the allowed region; < 0 when unknown. */
extern int bpf_gpuext_prefetch_resident(struct gpuext_prefetch_ctx *ctx, __u32 first,
					__u32 last) __ksym;
/* prefetch: the tenant config's prefetch_param for this fault's context (0: none). */
extern __u64 bpf_gpuext_prefetch_param(struct gpuext_prefetch_ctx *ctx) __ksym;

/* prefetch_node: take (1) or do not take (0) this node of the prefetch tree. */
extern int bpf_gpuext_prefetch_node_take(struct gpuext_prefetch_node_ctx *ctx, __u32 take) __ksym;

/*
 * Sleepable (a BPF workqueue callback): migrate pages [first, last] of VA
 * block va_block of context ctx_id (a prefetch ctx's ctx_id) whose tenant is
 * tenant_id.  Returns the pages migrated, or the core's refusal (gpuext_abi.h).
 */
extern int bpf_gpuext_migrate_range(__u64 ctx_id, __u32 tenant_id, __u64 va_block, __u32 first,
				    __u32 last) __ksym;

/* evict_arbitrate (system ops): read candidate context idx; request that idx give up a chunk. */
extern int bpf_gpuext_arbitrate_owner(struct gpuext_arbitrate_ctx *ctx, __u32 idx,
				      struct gpuext_evict_owner *owner) __ksym;
extern int bpf_gpuext_arbitrate_pick(struct gpuext_arbitrate_ctx *ctx, __u32 idx) __ksym;
/* evict_arbitrate: the eviction_param of candidate idx's tenant (0: none). */
extern __u64 bpf_gpuext_arbitrate_param(struct gpuext_arbitrate_ctx *ctx, __u32 idx) __ksym;

/* tsg_init: request a timeslice (GPUEXT_TIMESLICE_MIN_US..MAX_US) and an interleave level. */
extern int bpf_gpuext_tsg_set_timeslice(struct gpuext_tsg_ctx *ctx, __u32 us) __ksym;
extern int bpf_gpuext_tsg_set_interleave(struct gpuext_tsg_ctx *ctx, __u32 level) __ksym;
/* tsg_submit: request that TSG tsg_id (less urgent than this one) be preempted. */
extern int bpf_gpuext_tsg_preempt(struct gpuext_tsg_submit_ctx *ctx, __u64 tsg_id) __ksym;

#endif /* GPUEXT_KFUNCS_H */
