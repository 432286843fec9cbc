/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * bpftime/bpf/bpf_helpers.h - gpuext's own definitions of what bpftime's
 * GPU programs take from <bpf/bpf_helpers.h>: SEC, the BTF map macros, the
 * map helpers, and the host helpers those programs call, with what each
 * does inside a GPU kernel under gpuext (docs/device-probes.md):
 *   bpf_printk / bpf_trace_printk  dropped (returns 0; the arguments after
 *                                   the format are not evaluated)
 *   bpf_get_current_pid_tgid       the CUDA process's pid/tgid as the
 *                                   interposer sets it (0 until it does)
 *   bpf_perf_event_output          one record in a GPU ring buffer (map
 *                                   type 1527), from any lane
 * bpftime's GPU helpers (501..511) the programs declare themselves.
 */
#ifndef GPUEXT_BPFTIME_BPF_HELPERS_H
#define GPUEXT_BPFTIME_BPF_HELPERS_H

#define SEC(name) __attribute__((section(name), used))
#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name
#define __array(name, val) typeof(val) *name[]

#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_RINGBUF 27

#define BPF_ANY 0
#define BPF_NOEXIST 1
#define BPF_EXIST 2
#define BPF_F_CURRENT_CPU 0xffffffffULL

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)GPUEXT_PH_MAP_LOOKUP_ELEM;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, __u64 flags) = (void *)GPUEXT_PH_MAP_UPDATE_ELEM;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)GPUEXT_PH_MAP_DELETE_ELEM;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)GPUEXT_PH_KTIME_GET_NS;
static __u32 (*bpf_get_smp_processor_id)(void) = (void *)GPUEXT_PH_SMP_PROCESSOR_ID;
static long (*bpf_ringbuf_output)(void *ringbuf, void *data, __u64 size, __u64 flags) = (void *)GPUEXT_PH_RINGBUF_OUTPUT;
static long (*bpf_trace_printk)(const char *fmt, __u32 fmt_size, ...) = (void *)GPUEXT_BT_TRACE_PRINTK;
static __u64 (*bpf_get_current_pid_tgid)(void) = (void *)GPUEXT_BT_PID_TGID;
static long (*bpf_perf_event_output)(void *ctx, void *map, __u64 flags, void *data, __u64 size) = (void *)GPUEXT_BT_PERF_OUTPUT;

/* The format goes to the stack (so no .rodata), the arguments nowhere. */
#define bpf_printk(fmt, ...)                                    \
	({                                                      \
		char ____fmt[] = fmt;                           \
		bpf_trace_printk(____fmt, sizeof(____fmt));     \
	})

#endif /* GPUEXT_BPFTIME_BPF_HELPERS_H */
