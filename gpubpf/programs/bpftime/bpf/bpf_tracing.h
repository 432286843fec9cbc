/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * bpftime/bpf/bpf_tracing.h - gpuext's BPF_KPROBE for the host uprobes
 * bpftime's GPU objects carry beside their GPU programs: it only has to
 * compile (gpuext loads the GPU programs, not these).  Up to five
 * arguments, read from struct pt_regs (x86-64 calling convention); an
 * integer argument (bpftime's launchlate takes u64 grid and block dims)
 * compiles without -Wint-conversion, as with libbpf's.
 */
#ifndef GPUEXT_BPFTIME_BPF_TRACING_H
#define GPUEXT_BPFTIME_BPF_TRACING_H

#define PT_REGS_PARM1(x) ((x)->di)
#define PT_REGS_PARM2(x) ((x)->si)
#define PT_REGS_PARM3(x) ((x)->dx)
#define PT_REGS_PARM4(x) ((x)->cx)
#define PT_REGS_PARM5(x) ((x)->r8)
#define PT_REGS_RC(x) ((x)->ax)

#define ___gx_kp_args0(ctx) (ctx)
#define ___gx_kp_args1(ctx, a) ___gx_kp_args0(ctx), (void *)PT_REGS_PARM1(ctx)
#define ___gx_kp_args2(ctx, a, b) ___gx_kp_args1(ctx, a), (void *)PT_REGS_PARM2(ctx)
#define ___gx_kp_args3(ctx, a, b, c) ___gx_kp_args2(ctx, a, b), (void *)PT_REGS_PARM3(ctx)
#define ___gx_kp_args4(ctx, a, b, c, d) ___gx_kp_args3(ctx, a, b, c), (void *)PT_REGS_PARM4(ctx)
#define ___gx_kp_args5(ctx, a, b, c, d, e) ___gx_kp_args4(ctx, a, b, c, d), (void *)PT_REGS_PARM5(ctx)
#define ___gx_nth(_0, _1, _2, _3, _4, _5, N, ...) N
#define ___gx_count(...) ___gx_nth(_, ##__VA_ARGS__, 5, 4, 3, 2, 1, 0)
#define ___gx_cat2(a, b) a##b
#define ___gx_cat(a, b) ___gx_cat2(a, b)

#define BPF_KPROBE(name, args...)                                                   \
	name(struct pt_regs *ctx);                                                  \
	static __always_inline typeof(name(0)) ____##name(struct pt_regs *ctx, ##args); \
	typeof(name(0)) name(struct pt_regs *ctx)                                   \
	{                                                                           \
		_Pragma("GCC diagnostic push")                                      \
		_Pragma("GCC diagnostic ignored \"-Wint-conversion\"")              \
		return ____##name(___gx_cat(___gx_kp_args, ___gx_count(args))(ctx, ##args)); \
		_Pragma("GCC diagnostic pop")                                       \
	}                                                                           \
	static __always_inline typeof(name(0)) ____##name(struct pt_regs *ctx, ##args)

#define BPF_KRETPROBE(name, args...) BPF_KPROBE(name, ##args)

#endif /* GPUEXT_BPFTIME_BPF_TRACING_H */
