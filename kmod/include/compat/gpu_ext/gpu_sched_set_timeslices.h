/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * gpu_sched_set_timeslices.h - the name under which gpu_ext's scheduling
 * policies include their struct_ops header; here it is gpuext's
 * compatibility header (gpu_ext_sched.h).
 */
#include "gpu_ext_sched.h"
