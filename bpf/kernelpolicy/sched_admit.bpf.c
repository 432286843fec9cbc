//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * sched_admit.bpf.c - bind admission by context limit.  Sched ops
 * "sched_admit", claiming the standard class: a new TSG (GPU context) of a
 * tenant that already has its limit of bound TSGs is refused at bind.
 *
 * The limit of a tenant is admit_limits[tenant id], else admit_limits[0]
 * (the default), else unlimited.  admit_count holds each tenant's bound
 * TSGs; admit_tsgs remembers which TSGs were counted, so tsg_destroy gives
 * back exactly what bind took.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "gpuext_ops.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GPUEXT_MAX_TENANTS);
	__type(key, __u32);   /* tenant id, 0 = default */
	__type(value, __u32); /* bound TSGs allowed */
} admit_limits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GPUEXT_MAX_TENANTS);
	__type(key, __u32);   /* tenant id */
	__type(value, __u32); /* bound TSGs */
} admit_count SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);   /* tsg id */
	__type(value, __u32); /* tenant id it was counted for */
} admit_tsgs SEC(".maps");

SEC("struct_ops/tsg_bind")
int BPF_PROG(sched_admit_tsg_bind, struct gpuext_tsg_ctx *tctx)
{
	__u32 tenant = tctx->tenant_id, zero = 0, *limit, *count;
	__u64 tsg = tctx->tsg_id;

	if (!tenant)
		return GPUEXT_BIND_ADMIT;
	limit = bpf_map_lookup_elem(&admit_limits, &tenant);
	if (!limit)
		limit = bpf_map_lookup_elem(&admit_limits, &zero);
	if (!limit)
		return GPUEXT_BIND_ADMIT;
	bpf_map_update_elem(&admit_count, &tenant, &zero, BPF_NOEXIST);
	count = bpf_map_lookup_elem(&admit_count, &tenant);
	if (!count)
		return GPUEXT_BIND_ADMIT;
	/*
	 * Check, then add (bpfel -mcpu=v1 has no fetching atomics): two binds
	 * of one tenant racing may both pass; the driver binds one at a time.
	 */
	if (*count >= *limit)
		return GPUEXT_BIND_REFUSE;
	if (bpf_map_update_elem(&admit_tsgs, &tsg, &tenant, BPF_NOEXIST))
		return GPUEXT_BIND_ADMIT; /* cannot track it: do not count it */
	__sync_fetch_and_add(count, 1);
	return GPUEXT_BIND_ADMIT;
}

SEC("struct_ops/tsg_destroy")
void BPF_PROG(sched_admit_tsg_destroy, struct gpuext_tsg_ctx *tctx)
{
	__u64 tsg = tctx->tsg_id;
	__u32 *tenant, *count;

	tenant = bpf_map_lookup_elem(&admit_tsgs, &tsg);
	if (!tenant)
		return;
	count = bpf_map_lookup_elem(&admit_count, tenant);
	if (count && *count)
		__sync_fetch_and_add(count, -1);
	bpf_map_delete_elem(&admit_tsgs, &tsg);
}

SEC(".struct_ops.link")
struct gpuext_sched_ops sched_admit_ops = {
	.tsg_bind = (void *)sched_admit_tsg_bind,
	.tsg_destroy = (void *)sched_admit_tsg_destroy,
	.classes = GPUEXT_SCHED_CLASS(GPUEXT_PRIO_STANDARD),
	.name = "sched_admit",
};

char LICENSE[] SEC("license") = "GPL";
