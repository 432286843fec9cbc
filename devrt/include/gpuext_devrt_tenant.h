/*
 * gpuext_devrt_tenant.h - a tenant's settings as the device runtime reads
 * them, defined once.
 *
 * Admission writes $GPUEXT_TENANT_DIR/settings.bin (internal/admission,
 * through devrt/tenantcfg, whose Go layout is generated from this header);
 * the interposer reads it on the first CUDA call and re-reads quota_bytes
 * when the host replaces the file (temp file + rename). config.json beside it
 * is the human-readable view of the same tenant; the interposer never reads it.
 *
 * One fixed-size record: fixed-width fields, little-endian (x86-64, aarch64),
 * naturally aligned, no implicit padding. Every default is resolved by the
 * host: a value here is taken as it is, never replaced by another field.
 *
 * A reader takes the file only when it is exactly GPUEXT_DEVRT_TENANT_SIZE
 * bytes, with magic, version and size as below and every value in range;
 * otherwise it ignores the whole file (process-local defaults: no quota,
 * standard class, GPUEXT_DEVRT_DEFAULT_WINDOW_NS) and says so on its debug
 * line; ndevices above GPUEXT_DEVRT_MAX_DEVICES is out of range. Rules for
 * editing: a new field takes reserved space, where 0 must mean what a
 * reader that ignores the field does; bump GPUEXT_DEVRT_TENANT_VERSION for
 * any other change (version 2 appended the per-device quotas; version 3
 * took the kernel ABI's class numbers, gpuext_prio.h).
 *
 * Readers also take a version 2 file (GPUEXT_DEVRT_TENANT_VERSION_V2: the
 * same layout), translating its priority_class from the old numbering
 * (GPUEXT_DEVRT_CLASS_V2_*); the host writes version 3 only.
 */
#ifndef GPUEXT_DEVRT_TENANT_H
#define GPUEXT_DEVRT_TENANT_H

#include <stdint.h>

#include "gpuext_devrt_shm.h" /* GPUEXT_DEVRT_CLASS_*, GPUEXT_DEVRT_MAX_DEVICES */

#define GPUEXT_DEVRT_TENANT_MAGIC 0x53474e5453584750ULL /* "PGXSTNGS" read as bytes little-endian */
#define GPUEXT_DEVRT_TENANT_VERSION 3u /* 2: per-device quotas; 3: classes numbered as gpuext_prio.h */
#define GPUEXT_DEVRT_TENANT_VERSION_V2 2u /* still read: its classes translated */
#define GPUEXT_DEVRT_TENANT_FILE "settings.bin" /* in $GPUEXT_TENANT_DIR */
#define GPUEXT_DEVRT_TENANT_SIZE 200u

/* How long a latency-critical launch counts as pending when the policy names no window. */
#define GPUEXT_DEVRT_DEFAULT_WINDOW_NS 2000000ull
/* The lowest MPS client priority (CUDA_MPS_CLIENT_PRIORITY: 0 normal, 1 below normal). */
#define GPUEXT_DEVRT_MPS_PRIORITY_MAX 1u
/*
 * flags: a best-effort tenant's launches wait on the board's latency-critical
 * deadline (the launch gate). Off unless the policy asks for it (launchGate):
 * it holds the latency-critical tail on hosts without MPS at a large cost to
 * best-effort throughput, and starves framework trainers (docs/devrt.md).
 * Ignored under an MPS share (smPercent), which is the isolation then.
 */
#define GPUEXT_DEVRT_TENANT_LAUNCH_GATE 1u
/* The highest GPUEXT_DEVRT_CLASS_* value (and GPUEXT_DEVRT_CLASS_V2_* value). */
#define GPUEXT_DEVRT_CLASS_MAX ((uint32_t)GPUEXT_PRIO_MAX)

struct gpuext_devrt_tenant {
	uint64_t magic;            /* GPUEXT_DEVRT_TENANT_MAGIC */
	uint32_t version;          /* GPUEXT_DEVRT_TENANT_VERSION */
	uint32_t size;             /* GPUEXT_DEVRT_TENANT_SIZE */
	uint64_t tenant_id;        /* the host's tenant id (GPUEXT_TENANT_ID's value) */
	uint64_t quota_bytes;      /* device memory over all the tenant's processes; 0: no quota */
	uint64_t active_window_ns; /* latency-critical: how long after a launch its work counts as pending (> 0) */
	uint32_t priority_class;   /* GPUEXT_DEVRT_CLASS_* (at most GPUEXT_DEVRT_CLASS_MAX) */
	uint32_t sm_percent;       /* best-effort under MPS: share of the SMs on each GPU, 1..100; 0: not confined */
	/* Best-effort under MPS: CUDA_MPS_CLIENT_PRIORITY of its contexts, at most
	 * GPUEXT_DEVRT_MPS_PRIORITY_MAX; 0: normal (MPS's default) */
	uint32_t mps_client_priority;
	uint32_t flags;            /* GPUEXT_DEVRT_TENANT_* bits; others are ignored (new flags take them) */
	/*
	 * Latency-critical: the policy's latency target (latencyTarget), for the
	 * host's latency controller only (the device runtime does not read it;
	 * the board's reader of this file does, so the target is known where no
	 * agent runs). p99 of the tenant's requests at most lc_target_p99_us
	 * (absolute) or at most lc_target_ratio_milli / 1000 times the tenant's
	 * own p99 with no best-effort process on the node (relative); 0: none.
	 */
	uint32_t lc_target_p99_us;
	uint32_t lc_target_ratio_milli;
	/*
	 * Per-device quotas (version 2): a container given GPU memory by the
	 * scheduler (gpuext.io/gpu-memory) has a quota on each GPU it was
	 * given. ndevices 0: quota_bytes applies on every device, each on its
	 * own. ndevices N: device ordinal i < N (as the process sees them, after
	 * CUDA_VISIBLE_DEVICES) has device_quota_bytes[i] (0: no quota there),
	 * and an ordinal >= N has no memory (every allocation there is refused).
	 */
	uint32_t ndevices;         /* at most GPUEXT_DEVRT_MAX_DEVICES */
	/*
	 * The host GPUs the tenant was given (bit i: host GPU index i, i < 32),
	 * for a container given GPU memory by the device plugin; 0: not known
	 * (every GPU). The host's latency controller paces a best-effort
	 * tenant's launches only when its GPUs meet those of a latency-critical
	 * tenant that misses its target (the board's be_pace_gpus).
	 */
	uint32_t host_gpus;
	uint64_t device_quota_bytes[GPUEXT_DEVRT_MAX_DEVICES];
};

_Static_assert(sizeof(struct gpuext_devrt_tenant) == GPUEXT_DEVRT_TENANT_SIZE, "tenant settings layout");
_Static_assert(GPUEXT_DEVRT_CLASS_V2_BEST_EFFORT <= GPUEXT_DEVRT_CLASS_MAX, "every version 2 class has a number now");

/* A version 2 file's priority_class (GPUEXT_DEVRT_CLASS_V2_*, at most GPUEXT_DEVRT_CLASS_MAX) in today's numbering. */
static inline uint32_t gpuext_devrt_class_from_v2(uint32_t v2)
{
	switch (v2) {
	case GPUEXT_DEVRT_CLASS_V2_LATENCY_CRITICAL:
		return GPUEXT_DEVRT_CLASS_LATENCY_CRITICAL;
	case GPUEXT_DEVRT_CLASS_V2_BEST_EFFORT:
		return GPUEXT_DEVRT_CLASS_BEST_EFFORT;
	default:
		return GPUEXT_DEVRT_CLASS_STANDARD;
	}
}

#endif /* GPUEXT_DEVRT_TENANT_H */
