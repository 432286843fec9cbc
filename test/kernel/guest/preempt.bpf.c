//go:build ignore

/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * preempt.bpf.c - a test-only scheduling policy for every class: it
 * remembers the best-effort TSGs (tsg_init), and when a latency-critical
 * TSG submits work it asks to preempt each of them
 * (bpf_gpuext_tsg_preempt).  With PREEMPT_GREEDY set it also asks for the
 * latency-critical ones, which the core refuses.  tsg_init records the
 * creating task's comm (bpf_get_current_comm).
 */
#include "gpuext_policy.h"

#define PREEMPT_SLOTS 8

const volatile __u32 preempt_greedy = 0;

struct tsg_slot {
	__u64 tsg_id;
	__u32 priority_class;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PREEMPT_SLOTS);
	__type(key, __u32);
	__type(value, struct tsg_slot);
} preempt_tsgs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, char[16]);
} preempt_comm SEC(".maps");

/* A TSG's slot: tsg ids are sequential, and a test has fewer than PREEMPT_SLOTS at once. */
static __always_inline struct tsg_slot *slot_of(__u64 tsg_id)
{
	__u32 i = tsg_id % PREEMPT_SLOTS;

	return bpf_map_lookup_elem(&preempt_tsgs, &i);
}

SEC("struct_ops/tsg_init")
int BPF_PROG(preempt_init, struct gpuext_tsg_ctx *tctx)
{
	struct tsg_slot *s = slot_of(tctx->tsg_id);
	__u32 zero = 0;
	char *comm = bpf_map_lookup_elem(&preempt_comm, &zero);

	if (comm)
		bpf_get_current_comm(comm, 16);
	if (s) {
		s->tsg_id = tctx->tsg_id;
		s->priority_class = tctx->priority_class;
	}
	return GPUEXT_RET_DEFAULT; /* stock timeslices */
}

SEC("struct_ops/tsg_destroy")
void BPF_PROG(preempt_destroy, struct gpuext_tsg_ctx *tctx)
{
	struct tsg_slot *s = slot_of(tctx->tsg_id);

	if (s && s->tsg_id == tctx->tsg_id)
		s->tsg_id = 0;
}

SEC("struct_ops/tsg_submit")
int BPF_PROG(preempt_submit, struct gpuext_tsg_submit_ctx *sctx)
{
	__u32 i;

	if (sctx->priority_class != GPUEXT_PRIO_LATENCY_CRITICAL)
		return GPUEXT_RET_DEFAULT;
	for (i = 0; i < PREEMPT_SLOTS; i++) {
		__u32 key = i; /* the loop counter stays in a register the verifier tracks */
		struct tsg_slot *s = bpf_map_lookup_elem(&preempt_tsgs, &key);

		if (!s || !s->tsg_id || s->tsg_id == sctx->tsg_id)
			continue;
		if (s->priority_class == GPUEXT_PRIO_BEST_EFFORT || preempt_greedy)
			bpf_gpuext_tsg_preempt(sctx, s->tsg_id);
	}
	return GPUEXT_RET_HANDLED;
}

GPUEXT_SCHED_OPS(preempt_ops) = {
	.tsg_init = (void *)preempt_init,
	.tsg_destroy = (void *)preempt_destroy,
	.tsg_submit = (void *)preempt_submit,
	.classes = GPUEXT_SCHED_CLASS_ALL,
	.name = "preempt",
};

GPUEXT_LICENSE;
