/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * gpuext_probe.h - what a device probe program includes: the fixed-width
 * types, BTF map definitions, the section macro and the helpers of
 * docs/device-probes.md (kernel numbers where the kernel has the helper,
 * device-only ones from GPUEXT_PH_BASE).  Self-contained so the probes build
 * with clang -target bpf and no system headers.
 */
#ifndef GPUEXT_PROBE_H
#define GPUEXT_PROBE_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed int __s32;
typedef signed long long __s64;

#include <gpuext_abi.h>

#define SEC(name) __attribute__((section(name), used))
#define __always_inline inline __attribute__((always_inline))

/* BTF-defined maps, as libbpf spells them. */
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

/* enum bpf_map_type values of the device map types. */
#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_RINGBUF 27
/* gpuext's per-thread array: one row of max_entries values per thread of
 * the launch (map_extra rows, default GPUEXT_DMAP_THREAD_SLOTS); a lookup
 * gives the calling thread its own row, so any lane may write it. */
#define BPF_MAP_TYPE_GPUEXT_PER_THREAD GPUEXT_MAP_TYPE_PER_THREAD

#define BPF_ANY 0
#define BPF_NOEXIST 1
#define BPF_EXIST 2

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)GPUEXT_PH_MAP_LOOKUP_ELEM;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, __u64 flags) = (void *)GPUEXT_PH_MAP_UPDATE_ELEM;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)GPUEXT_PH_MAP_DELETE_ELEM;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)GPUEXT_PH_KTIME_GET_NS;
static __u32 (*bpf_get_smp_processor_id)(void) = (void *)GPUEXT_PH_SMP_PROCESSOR_ID;
static long (*bpf_ringbuf_output)(void *ringbuf, void *data, __u64 size, __u64 flags) = (void *)GPUEXT_PH_RINGBUF_OUTPUT;

static __u32 (*gpuext_thread_idx)(__u32 dim) = (void *)GPUEXT_PH_THREAD_IDX;
static __u32 (*gpuext_block_idx)(__u32 dim) = (void *)GPUEXT_PH_BLOCK_IDX;
static __u32 (*gpuext_block_dim)(__u32 dim) = (void *)GPUEXT_PH_BLOCK_DIM;
static __u32 (*gpuext_grid_dim)(__u32 dim) = (void *)GPUEXT_PH_GRID_DIM;
static __u32 (*gpuext_warp_id)(void) = (void *)GPUEXT_PH_WARP_ID;
static __u32 (*gpuext_lane_id)(void) = (void *)GPUEXT_PH_LANE_ID;
static __u32 (*gpuext_sm_id)(void) = (void *)GPUEXT_PH_SM_ID;
static __u64 (*gpuext_globaltimer)(void) = (void *)GPUEXT_PH_GLOBALTIMER;
static __u64 (*gpuext_block_linear_id)(void) = (void *)GPUEXT_PH_BLOCK_LINEAR_ID;
static __u64 (*gpuext_thread_linear_id)(void) = (void *)GPUEXT_PH_THREAD_LINEAR_ID;
/* The thread's linear index in the launch: an array key that is this id,
 * or a strictly increasing function of it (id*k + c, no wrap), names an
 * entry no other thread of the launch touches. */
static __u64 (*gpuext_global_thread_id)(void) = (void *)GPUEXT_PH_GLOBAL_THREAD_ID;

/* Adds n to the u64 counter at index idx of an array map of u64 values. */
#define gpuext_count(map, idx, n)                                  \
	do {                                                       \
		__u32 __k = (idx);                                 \
		__u64 *__v = bpf_map_lookup_elem((map), &__k);     \
		if (__v)                                           \
			__sync_fetch_and_add(__v, (n));            \
	} while (0)

#endif /* GPUEXT_PROBE_H */
