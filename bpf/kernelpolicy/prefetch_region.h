/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * prefetch_region.h - what the prefetch policies include: the ops types and
 * the core's kfuncs (gpuext_kfuncs.h: the one request they may make,
 * bpf_gpuext_prefetch_set_region, and the reads of residency and their
 * tenant's parameter).  The core accepts a region only when it holds the
 * faulting page and lies inside [region_first, region_last].
 */
#ifndef GPUEXT_PREFETCH_REGION_H
#define GPUEXT_PREFETCH_REGION_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "gpuext_ops.h"
#include "gpuext_kfuncs.h"

#endif /* GPUEXT_PREFETCH_REGION_H */
