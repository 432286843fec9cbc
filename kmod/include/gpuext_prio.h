/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * gpuext_prio.h - the priority classes of gpuext, numbered once.
 *
 * The kernel side (gpuext_abi.h: the tenant config, the sched ops' classes
 * bits, the BPF policies) and the device runtime (devrt/include: the tenant
 * settings file, the usage file) use these numbers; Go gets them through
 * bpf2go (bpf.Priority*) and the devrt layout generator (tenantcfg.Class*),
 * both from this header. Lower is more urgent: policies compare them
 * (priority_class >= GPUEXT_PRIO_STANDARD).  No types, no includes: the
 * kernel module, BPF programs and the device runtime's C include it as it
 * is.
 */
#ifndef GPUEXT_PRIO_H
#define GPUEXT_PRIO_H

/* Priority classes, most urgent first. */
enum gpuext_priority_class {
	GPUEXT_PRIO_LATENCY_CRITICAL = 0,
	GPUEXT_PRIO_STANDARD = 1,
	GPUEXT_PRIO_BEST_EFFORT = 2,
};

/* The highest class value. */
#define GPUEXT_PRIO_MAX GPUEXT_PRIO_BEST_EFFORT

#endif /* GPUEXT_PRIO_H */
