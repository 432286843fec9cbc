/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * vmlinux.h - for gpu_ext sources built against gpuext's compatibility
 * headers (gpu_ext_sched.h): the kernel types such a policy uses (the
 * fixed-width integers and the BPF map and flag constants), from the UAPI
 * headers instead of a BTF dump of one kernel.
 */
#ifndef GPUEXT_COMPAT_VMLINUX_H
#define GPUEXT_COMPAT_VMLINUX_H
#include <linux/types.h>
#include <linux/bpf.h>
typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
typedef __s32 s32;
typedef __s64 s64;
#endif
