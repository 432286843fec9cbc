/*
 * probe.h - what the verifier corpus programs share: fixed-width types,
 * the ABI header (struct gpuext_probe_ctx, helper numbers), map
 * declaration macros and the helpers, declared by number.  Self-contained
 * on purpose: no libbpf headers needed.
 */
#ifndef CORPUS_PROBE_H
#define CORPUS_PROBE_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef int __s32;
typedef long long __s64;

#include "gpuext_abi.h"

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int(*name)[val]
#define __type(name, val) typeof(val) *name

enum {
	MAP_HASH = 1,
	MAP_ARRAY = 2,
	MAP_PROG_ARRAY = 3,
	MAP_PERCPU_ARRAY = 6,
	MAP_LRU_HASH = 9,
	MAP_RINGBUF = 27,
};

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)GPUEXT_PH_MAP_LOOKUP_ELEM;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, __u64 flags) = (void *)GPUEXT_PH_MAP_UPDATE_ELEM;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)GPUEXT_PH_MAP_DELETE_ELEM;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)GPUEXT_PH_KTIME_GET_NS;
static long (*bpf_trace_printk)(const char *fmt, __u32 fmt_size, ...) = (void *)6;
static long (*bpf_ringbuf_output)(void *ringbuf, void *data, __u64 size, __u64 flags) = (void *)GPUEXT_PH_RINGBUF_OUTPUT;

static long (*gpuext_thread_idx)(__u32 dim) = (void *)GPUEXT_PH_THREAD_IDX;
static long (*gpuext_block_idx)(__u32 dim) = (void *)GPUEXT_PH_BLOCK_IDX;
static long (*gpuext_block_dim)(__u32 dim) = (void *)GPUEXT_PH_BLOCK_DIM;
static long (*gpuext_grid_dim)(__u32 dim) = (void *)GPUEXT_PH_GRID_DIM;
static long (*gpuext_warp_id)(void) = (void *)GPUEXT_PH_WARP_ID;
static long (*gpuext_lane_id)(void) = (void *)GPUEXT_PH_LANE_ID;
static long (*gpuext_sm_id)(void) = (void *)GPUEXT_PH_SM_ID;
static long (*gpuext_globaltimer)(void) = (void *)GPUEXT_PH_GLOBALTIMER;
static long (*gpuext_block_linear_id)(void) = (void *)GPUEXT_PH_BLOCK_LINEAR_ID;
static long (*gpuext_thread_linear_id)(void) = (void *)GPUEXT_PH_THREAD_LINEAR_ID;

char LICENSE[] SEC("license") = "GPL";

#endif
