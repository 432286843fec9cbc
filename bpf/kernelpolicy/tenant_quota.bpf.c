//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * tenant_quota.bpf.c - tenant-quota eviction.  As the system ops
 * (debugfs gpuext/system = "tenant_quota") it arbitrates a full device: a
 * context of the tenant furthest beyond its quota gives up the chunk (its
 * least recently used context first); with no tenant over quota the
 * driver's stock choice stands.  Within a context, chunks leave in LRU
 * order.  Memory ops "tenant_quota"
 * (tenant config eviction_policy = GPUEXT_EVICT_TENANT_QUOTA).
 */
#include "evict_sort.h"

SEC("struct_ops/evict_arbitrate")
int BPF_PROG(tenant_quota_arbitrate, struct gpuext_arbitrate_ctx *actx)
{
	__u64 best_excess = 0, best_seq = 0;
	__u32 i, best = 0;
	int found = 0;

	/* Bounded by the constant; ends on the kfunc's end-of-list answer. */
	for (i = 0; i < GPUEXT_EVICT_MAX_CANDIDATES; i++) {
		struct gpuext_evict_owner o = {};
		__u64 excess;

		if (bpf_gpuext_arbitrate_owner(actx, i, &o))
			break;
		if (!o.quota_bytes || o.tenant_resident_bytes <= o.quota_bytes)
			continue;
		excess = o.tenant_resident_bytes - o.quota_bytes;
		if (!found || excess > best_excess ||
		    (excess == best_excess && o.access_seq < best_seq)) {
			found = 1;
			best = i;
			best_excess = excess;
			best_seq = o.access_seq;
		}
	}
	if (!found || bpf_gpuext_arbitrate_pick(actx, best))
		return GPUEXT_RET_DEFAULT;
	return GPUEXT_RET_HANDLED;
}

SEC("struct_ops/evict_prepare")
int BPF_PROG(tenant_quota_evict_prepare, struct gpuext_evict_ctx *ectx)
{
	return gpuext_evict_sort(ectx, EVICT_KEY_ACCESS);
}

SEC(".struct_ops.link")
struct gpuext_mem_ops tenant_quota_ops = {
	.evict_prepare = (void *)tenant_quota_evict_prepare,
	.evict_arbitrate = (void *)tenant_quota_arbitrate,
	.name = "tenant_quota",
};

char LICENSE[] SEC("license") = "GPL";
