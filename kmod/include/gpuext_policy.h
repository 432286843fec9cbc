/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * gpuext_policy.h - the one header a gpuext policy outside this tree
 * includes (the SDK, docs/write-a-policy.md): the ops types, contexts and
 * kfuncs of the core, libbpf's program macros, and the macros that make an
 * object loadable from a kernel policy directory.
 *
 *	#include "gpuext_policy.h"
 *
 *	GPUEXT_POLICY_ABI;
 *
 *	SEC("struct_ops/evict_prepare")
 *	int BPF_PROG(my_evict, struct gpuext_evict_ctx *ectx) { ... }
 *	(not "ctx": BPF_PROG names the raw context so)
 *
 *	GPUEXT_MEM_OPS(my_ops) = { .evict_prepare = (void *)my_evict };
 *	GPUEXT_LICENSE;
 *
 * The loader sets the ops' name (from the descriptor) and a scheduling
 * policy's classes; leave them out or make them agree.
 */
#ifndef GPUEXT_POLICY_H
#define GPUEXT_POLICY_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "gpuext_ops.h"
#include "gpuext_kfuncs.h"

/*
 * The ABI version the object is built against; the loader refuses an
 * object whose version is not its own, naming both.
 */
#define GPUEXT_POLICY_ABI \
	const volatile __u32 gpuext_policy_abi = GPUEXT_ABI_VERSION

/* The policy's ops, in the section cilium/ebpf and libbpf attach with a link. */
#define GPUEXT_MEM_OPS(var) SEC(".struct_ops.link") struct gpuext_mem_ops var
#define GPUEXT_SCHED_OPS(var) SEC(".struct_ops.link") struct gpuext_sched_ops var

/* struct_ops programs call GPL kfuncs. */
#define GPUEXT_LICENSE char _license[] SEC("license") = "GPL"

/* A bounded loop over evict_prepare's candidates: i from 0 while the core has one. */
#define gpuext_for_each_candidate(ctx, i, info)                          \
	for ((i) = 0; (i) < GPUEXT_EVICT_MAX_CANDIDATES &&              \
		      !bpf_gpuext_evict_chunk((ctx), (i), &(info));     \
	     (i)++)

#endif /* GPUEXT_POLICY_H */
