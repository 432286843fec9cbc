/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * comm-timeslice.bpf.c - timeslice and interleave level by process name,
 * written in gpu_ext's scheduling API (nv_gpu_sched_ops, the bpf_nv_gpu_*
 * kfuncs) and built with the SDK's compatibility header
 * (compat/gpu_ext/gpu_ext_sched.h, docs/gpu-ext-mapping.md): it shows that
 * a policy written for gpu_ext runs on gpuext's scheduling ops.
 *
 * The operator fills two maps: comm_timeslice_us (process name -> us) and
 * comm_interleave (process name -> RM interleave level, LOW/MEDIUM/HIGH =
 * 0/1/2).  A TSG created by a process named in either map gets those
 * values; any other TSG keeps the driver's.  The name is the creating
 * thread's (bpf_get_current_comm), which a tenant chooses freely: it only
 * picks among the values the operator listed, for the TSGs of tenants in
 * the classes this policy claims, and the core still checks each value.
 * counts[] tells what happened: TSGs seen, named, values refused.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "compat/gpu_ext/gpu_ext_sched.h"

#define COMM_LEN 16

struct comm_key {
	char comm[COMM_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct comm_key);
	__type(value, __u64); /* timeslice, us */
} comm_timeslice_us SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct comm_key);
	__type(value, __u32); /* NV_INTERLEAVE_LEVEL_* */
} comm_interleave SEC(".maps");

enum { COUNT_INIT, COUNT_NAMED, COUNT_REFUSED, COUNT_BIND, COUNT_MAX };

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, COUNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

static __always_inline void count(__u32 what)
{
	__u64 *n = bpf_map_lookup_elem(&counts, &what);

	if (n)
		__sync_fetch_and_add(n, 1);
}

SEC("struct_ops/on_task_init")
int BPF_PROG(comm_task_init, struct nv_gpu_task_init_ctx *init)
{
	struct comm_key key = {};
	__u64 *us;
	__u32 *level;
	int asked = 0, refused = 0;

	count(COUNT_INIT);
	bpf_get_current_comm(key.comm, sizeof(key.comm));
	us = bpf_map_lookup_elem(&comm_timeslice_us, &key);
	if (us) {
		asked = 1;
		refused |= bpf_nv_gpu_set_timeslice(init, *us) != 0;
	}
	level = bpf_map_lookup_elem(&comm_interleave, &key);
	if (level) {
		asked = 1;
		refused |= bpf_nv_gpu_set_interleave(init, *level) != 0;
	}
	if (!asked)
		return 0; /* not named: the driver's values */
	count(COUNT_NAMED);
	if (refused)
		count(COUNT_REFUSED);
	return 1; /* the requests stand (the core keeps stock if one was refused) */
}

SEC("struct_ops/on_bind")
int BPF_PROG(comm_bind, struct nv_gpu_bind_ctx *bind)
{
	count(COUNT_BIND);
	return 0; /* admit */
}

SEC(".struct_ops")
struct nv_gpu_sched_ops comm_timeslice_ops = {
	.on_task_init = (void *)comm_task_init,
	.on_bind = (void *)comm_bind,
};

char _license[] SEC("license") = "GPL";
