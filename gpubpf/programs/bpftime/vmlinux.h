/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * bpftime/vmlinux.h - gpuext's stand-in for the vmlinux.h that bpftime's GPU
 * programs include: the kernel type names they use (u8..u64, s8..s64 and
 * the __u/__s spellings), struct pt_regs for the host-side uprobes those
 * objects also carry (x86-64 layout), and gpuext's device-probe ABI.  With
 * -I gpubpf/programs/bpftime (and -I kmod/include for gpuext_abi.h) an
 * unmodified bpftime example builds against gpuext's headers alone; see
 * docs/device-probes.md, "bpftime's GPU programs".
 */
#ifndef GPUEXT_BPFTIME_VMLINUX_H
#define GPUEXT_BPFTIME_VMLINUX_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef signed short __s16;
typedef signed int __s32;
typedef signed long long __s64;
typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
typedef __s8 s8;
typedef __s16 s16;
typedef __s32 s32;
typedef __s64 s64;
typedef _Bool bool;
enum { false = 0, true = 1 };
#ifndef NULL
#define NULL ((void *)0)
#endif

/* enum bpf_map_flags bits bpftime's programs name. */
enum { BPF_F_NO_PREALLOC = 1U << 0, BPF_F_RDONLY_PROG = 1U << 7, BPF_F_MMAPABLE = 1U << 10 };

#ifndef __TARGET_ARCH_x86
#define __TARGET_ARCH_x86
#endif

/* x86-64 user registers, for the uprobe programs bpftime's objects carry
 * next to their GPU programs (gpuext does not load those). */
struct pt_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	unsigned long ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};

#include <gpuext_abi.h>

#endif /* GPUEXT_BPFTIME_VMLINUX_H */
