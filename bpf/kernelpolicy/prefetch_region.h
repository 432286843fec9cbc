/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * prefetch_region.h - what the prefetch policies share: the one request
 * kfunc they may make, and the read of their tenant's parameter.  The core accepts a region only when it holds the
 * faulting page and lies inside [region_first, region_last].
 */
#ifndef GPUEXT_PREFETCH_REGION_H
#define GPUEXT_PREFETCH_REGION_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "gpuext_ops.h"

extern int bpf_gpuext_prefetch_set_region(struct gpuext_prefetch_ctx *ctx, __u32 first,
					  __u32 last) __ksym;
/* Resident pages in [first, last] of the allowed region; < 0 when unknown. */
extern int bpf_gpuext_prefetch_resident(struct gpuext_prefetch_ctx *ctx, __u32 first,
					__u32 last) __ksym;
/* The tenant config's prefetch_param for this fault's context (0: none). */
extern __u64 bpf_gpuext_prefetch_param(struct gpuext_prefetch_ctx *ctx) __ksym;

#endif /* GPUEXT_PREFETCH_REGION_H */
