/*
 * gpuext_devrt_shm.h - the device runtime's shared-memory layouts, defined once.
 *
 * Two files use these layouts (docs/devrt.md):
 *
 *  - the tenant's usage file, $GPUEXT_TENANT_ACCT/usage, writable by every
 *    process of ONE tenant and by nobody else: a header (quota copy, peak,
 *    refused allocations, delayed launches, the tenant's own latency-critical
 *    activity) and GPUEXT_DEVRT_SLOTS per-process slots;
 *  - the priority board, $GPUEXT_BOARD, published by the host and read-only in
 *    every container: the deadline until which latency-critical work is
 *    considered pending on the GPU.
 *
 * Concurrency is C11 atomics only, no mutex: a process killed at any point
 * leaves nothing locked. A slot's owner holds an open-file-description lock
 * (F_OFD_SETLK) on the slot's first byte of the usage file for as long as it
 * lives; the kernel drops the lock when the process dies, so "slot has a pid
 * but nobody holds its lock" means the owner is gone and its bytes no longer
 * count (the slot is then reclaimed: locked, pid CAS'd to 0, counters zeroed).
 * The lock belongs to the owner's own open of the file, not to the process
 * (a POSIX record lock would go with any close() of the file anywhere in the
 * process). The lock is a liveness beacon, never waited on; it works across
 * pid namespaces (containers of one pod) and is immune to pid reuse. pid and
 * start_time are kept for reporting.
 *
 * The host reads these files with pread, never mapped (a tenant can truncate
 * its file), and trusts nothing in them about the tenant itself: the class
 * and the active window come from the host's own tenant state, and
 * lc_active_until_ns is clamped to now + that window. It reads them when it
 * has to (GPUEXT_DEVRT_WAKE_FILE), not on a clock.
 *
 * All fields are fixed width, little-endian (x86-64, aarch64), naturally
 * aligned. A reader checks magic, version, header_size, slot_size, nslots.
 */
#ifndef GPUEXT_DEVRT_SHM_H
#define GPUEXT_DEVRT_SHM_H

#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>
#include <stdatomic.h>

#include "../../kmod/include/gpuext_prio.h" /* the priority classes, numbered once for the kernel and here */

#define GPUEXT_DEVRT_USAGE_MAGIC 0x4547415355584750ULL /* "PGXUSAGE" read as bytes little-endian */
#define GPUEXT_DEVRT_BOARD_MAGIC 0x4452414f42584750ULL /* "PGXBOARD" */
#define GPUEXT_DEVRT_SHM_VERSION 1u
#define GPUEXT_DEVRT_SLOTS 256u
#define GPUEXT_DEVRT_USAGE_FILE "usage"
/*
 * $GPUEXT_TENANT_ACCT/wake: a FIFO, how a latency-critical process tells the
 * host that its tenant's deadline moved when the host may not read it in
 * time by itself. The host reads a latency-critical tenant's deadline again
 * window / GPUEXT_DEVRT_READ_AHEAD_DIV before it passes, and not at all once
 * it is nearer than that; a process writes one byte to the
 * FIFO whenever it moves lc_active_until_ns from a value that had passed or
 * was within window / GPUEXT_DEVRT_WAKE_AHEAD_DIV of passing (a start, or
 * the next request of a tenant whose requests are almost a window apart).
 * The FIFO's reach (half a window) is wider than the host's read-ahead (a
 * quarter) by the host's own lateness: an extension the host's last read
 * before a deadline missed always finds that deadline within the FIFO's
 * reach. Extensions farther ahead stay silent: the host's own read before
 * the old deadline finds them. The host creates the FIFO (mode 0666 in the tenant's acct dir;
 * a process creates it when it is first); both sides open it
 * O_RDWR|O_NONBLOCK, so neither waits for the other and a writer never gets
 * SIGPIPE. A tenant that floods its FIFO is heard at most twice per half
 * window.
 */
#define GPUEXT_DEVRT_WAKE_FILE "wake"
#define GPUEXT_DEVRT_WAKE_AHEAD_DIV 2u
#define GPUEXT_DEVRT_READ_AHEAD_DIV 4u
/* The most device ordinals a tenant has a quota and an account for. */
#define GPUEXT_DEVRT_MAX_DEVICES 16u

/* slot.pid: 0 = free; otherwise the owner's pid (in the owner's namespace). */

struct gpuext_devrt_slot {
	_Atomic uint32_t pid;         /* owner pid, 0 when free */
	uint32_t reserved0;
	_Atomic uint64_t start_time;  /* owner's /proc/self/stat field 22 (clock ticks since boot) */
	_Atomic uint64_t bytes;       /* device bytes this process holds now (reservations included) */
	_Atomic uint64_t peak;        /* highest value of bytes */
	_Atomic uint64_t allocs;      /* successful allocations (monotonic) */
	_Atomic uint64_t frees;       /* accounted frees (monotonic) */
	_Atomic uint64_t refused;     /* allocations this process had refused */
	_Atomic uint64_t delayed;     /* launches this process delayed */
};

struct gpuext_devrt_usage_header {
	_Atomic uint64_t magic;            /* GPUEXT_DEVRT_USAGE_MAGIC once initialised */
	uint32_t version;                  /* GPUEXT_DEVRT_SHM_VERSION */
	uint32_t nslots;                   /* GPUEXT_DEVRT_SLOTS */
	uint32_t header_size;              /* sizeof(struct gpuext_devrt_usage_header) */
	uint32_t slot_size;                /* sizeof(struct gpuext_devrt_slot) */
	_Atomic uint64_t tenant_id;        /* from the tenant config */
	_Atomic uint64_t quota_bytes;      /* the quota last read from the tenant config (0 = none) */
	_Atomic uint64_t peak_bytes;       /* highest tenant total seen after an allocation */
	_Atomic uint64_t refused_allocs;   /* allocations refused with CUDA_ERROR_OUT_OF_MEMORY */
	_Atomic uint64_t delayed_launches; /* best-effort launches that waited for latency-critical work */
	_Atomic uint64_t delayed_ns;       /* total time those launches waited */
	_Atomic uint64_t launches;         /* launches seen by the interposer */
	_Atomic uint64_t lc_active_until_ns; /* latency-critical tenants: CLOCK_MONOTONIC deadline of own pending work */
	_Atomic uint32_t priority_class;   /* GPUEXT_DEVRT_CLASS_* as the process read it (reporting only) */
	uint32_t reserved1;
	/*
	 * Latency-critical tenants: CLOCK_MONOTONIC time by which the request
	 * that began last (the first launch after a wait for the GPU returned)
	 * is expected to be done: its start + the running mean of earlier
	 * requests' start-to-wait-return times. Written before the deadline
	 * above, so a host read that sees the deadline sees it too.
	 */
	_Atomic uint64_t lc_busy_until_ns;
	/*
	 * Waits for the GPU that returned (cuCtxSynchronize, cuStreamSynchronize,
	 * cuEventSynchronize), every class: completed work, which the host
	 * watches to tell a best-effort tenant that makes no progress (stalled)
	 * from one that runs.
	 */
	_Atomic uint64_t synced;
	/*
	 * Latency-critical tenants: requests that ended (the same requests as
	 * lc_busy_until_ns) and their summed durations; each is also counted in
	 * the latency histogram that follows the slots (struct
	 * gpuext_devrt_lc_latency), which the host reads for the tenant's p99.
	 */
	_Atomic uint64_t lc_requests;
	_Atomic uint64_t lc_request_ns;
	/*
	 * Processes of the tenant that used the GPU and then called exit(), and
	 * those of them whose status was not 0 (a trainer that stops on a NaN
	 * loss, an inference server that fails): counted by the process itself,
	 * so a death by a signal is not among them. The host reports a failure
	 * instead of leaving it silent.
	 */
	_Atomic uint64_t exits;
	_Atomic uint64_t failed_exits;
	uint64_t reserved[14];
};

/*
 * The device runtime's names for the priority classes: the kernel ABI's
 * numbers (gpuext_prio.h; latency-critical 0, standard 1, best-effort 2).
 * Before settings version 3 the device runtime numbered them standard 0,
 * latency-critical 1, best-effort 2 (GPUEXT_DEVRT_CLASS_V2_*): readers of a
 * version 2 settings file translate. The usage header's priority_class is
 * reporting only (the host takes the class from its own state; only the
 * test tool usage_dump, built with the library, acts on it), so the usage
 * file's version stays.
 */
#define GPUEXT_DEVRT_CLASS_LATENCY_CRITICAL ((uint32_t)GPUEXT_PRIO_LATENCY_CRITICAL)
#define GPUEXT_DEVRT_CLASS_STANDARD ((uint32_t)GPUEXT_PRIO_STANDARD)
#define GPUEXT_DEVRT_CLASS_BEST_EFFORT ((uint32_t)GPUEXT_PRIO_BEST_EFFORT)
#define GPUEXT_DEVRT_CLASS_V2_STANDARD 0u
#define GPUEXT_DEVRT_CLASS_V2_LATENCY_CRITICAL 1u
#define GPUEXT_DEVRT_CLASS_V2_BEST_EFFORT 2u

/*
 * A slot's bytes per device ordinal (the owner's view, after
 * CUDA_VISIBLE_DEVICES): slot.bytes is their sum. Kept apart from the slot
 * so a reader of the totals keeps its layout; zeroed with the slot.
 */
struct gpuext_devrt_slot_devices {
	_Atomic uint64_t bytes[GPUEXT_DEVRT_MAX_DEVICES];
};

/*
 * A latency-critical tenant's request durations: a log-linear histogram,
 * GPUEXT_DEVRT_LAT_SUB buckets per doubling from 2^GPUEXT_DEVRT_LAT_MIN_SHIFT
 * ns (1 us) over GPUEXT_DEVRT_LAT_BUCKETS / GPUEXT_DEVRT_LAT_SUB doublings
 * (to 67 ms; longer requests count in the last bucket, shorter ones in the
 * first). Bucket i holds durations from gpuext_devrt_lat_floor(i) to the
 * next bucket's floor: a 12.5% step, fine enough for a target such as
 * "p99 at most 1.5x". Counters only grow; the host takes differences over
 * its own interval. The host computes bucket floors with the same formula
 * (the constants are generated into its reader).
 */
#define GPUEXT_DEVRT_LAT_BUCKETS 128u
#define GPUEXT_DEVRT_LAT_SUB 8u
#define GPUEXT_DEVRT_LAT_SUB_SHIFT 3u /* log2(GPUEXT_DEVRT_LAT_SUB) */
#define GPUEXT_DEVRT_LAT_MIN_SHIFT 10u

struct gpuext_devrt_lc_latency {
	_Atomic uint64_t bucket[GPUEXT_DEVRT_LAT_BUCKETS];
};

static inline uint32_t gpuext_devrt_lat_bucket(uint64_t ns)
{
	uint32_t oct;
	uint64_t i;

	if (ns < (1ull << GPUEXT_DEVRT_LAT_MIN_SHIFT))
		return 0;
	oct = 63u - (uint32_t)__builtin_clzll(ns);
	i = (uint64_t)(oct - GPUEXT_DEVRT_LAT_MIN_SHIFT) * GPUEXT_DEVRT_LAT_SUB +
	    ((ns >> (oct - GPUEXT_DEVRT_LAT_SUB_SHIFT)) & (GPUEXT_DEVRT_LAT_SUB - 1));
	return i < GPUEXT_DEVRT_LAT_BUCKETS ? (uint32_t)i : GPUEXT_DEVRT_LAT_BUCKETS - 1;
}

/* The shortest duration bucket i holds. */
static inline uint64_t gpuext_devrt_lat_floor(uint32_t i)
{
	uint32_t oct = GPUEXT_DEVRT_LAT_MIN_SHIFT + i / GPUEXT_DEVRT_LAT_SUB;

	return (uint64_t)(GPUEXT_DEVRT_LAT_SUB + i % GPUEXT_DEVRT_LAT_SUB) << (oct - GPUEXT_DEVRT_LAT_SUB_SHIFT);
}

struct gpuext_devrt_usage {
	struct gpuext_devrt_usage_header hdr;
	struct gpuext_devrt_slot slot[GPUEXT_DEVRT_SLOTS];
	struct gpuext_devrt_slot_devices slot_dev[GPUEXT_DEVRT_SLOTS];
	struct gpuext_devrt_lc_latency lc_latency;
};

/* Byte of the usage file a live slot owner keeps write-locked (F_OFD_SETLK). */
#define GPUEXT_DEVRT_SLOT_LOCK_OFFSET(i) \
	((off_t)(offsetof(struct gpuext_devrt_usage, slot) + (size_t)(i) * sizeof(struct gpuext_devrt_slot)))

/*
 * The priority board: written in place by the host publisher (never replaced
 * by rename: readers keep it mapped), read-only in containers.
 */
struct gpuext_devrt_board {
	_Atomic uint64_t magic;              /* GPUEXT_DEVRT_BOARD_MAGIC */
	uint32_t version;                    /* GPUEXT_DEVRT_SHM_VERSION */
	uint32_t size;                       /* sizeof(struct gpuext_devrt_board) */
	_Atomic uint64_t lc_active_until_ns; /* CLOCK_MONOTONIC: latency-critical work pending until then */
	_Atomic uint64_t seq;                /* bumped by the publisher on every update */
	/*
	 * CLOCK_MONOTONIC: the latest expected end of a latency-critical
	 * request in progress (the usage header's lc_busy_until_ns, never past
	 * that tenant's published deadline). A best-effort launch that has
	 * waited out its longest delay goes only after a request ends, when the
	 * gap to the next one is longest (priority.c).
	 */
	_Atomic uint64_t lc_busy_until_ns;
	/*
	 * Chosen by the host's latency controller (docs/priority-control.md):
	 * be_sm_percent, when 1..100, is the MPS share a best-effort context
	 * created now gets (never above its policy's smPercent; 0: the policy's);
	 * be_pace, when GPUEXT_DEVRT_PACE_REQUEST, holds a best-effort launch
	 * while a latency-critical request is in progress (lc_busy_until_ns), at
	 * most the tenant's longest delay; when GPUEXT_DEVRT_PACE_HOLD, holds it
	 * while be_pace stays so, at most GPUEXT_DEVRT_PACE_HOLD_MAX_NS (the
	 * controller measuring a latency-critical tenant alone); 0: no pacing.
	 */
	_Atomic uint32_t be_sm_percent;
	_Atomic uint32_t be_pace;
	/*
	 * With be_pace: the host GPUs (bit i: host GPU index i) whose
	 * best-effort tenants are paced, those of the latency-critical tenants
	 * missing their targets; 0: every GPU (a missing tenant's GPUs are not
	 * known). A best-effort tenant whose settings name its GPUs (host_gpus)
	 * and meet none of these is not paced.
	 */
	_Atomic uint64_t be_pace_gpus;
	/*
	 * With be_pace: at most this many of a paced best-effort process's
	 * launches are unfinished when it launches again (1..16; 0: no bound).
	 * A trainer's framework queues a whole step ahead of the GPU, so
	 * holding only new launches during a request leaves the queue running
	 * beside it; with the bound, a request that begins finds at most this
	 * many best-effort kernels left to finish.
	 */
	_Atomic uint32_t be_pace_depth;
	uint32_t reserved;
};
#define GPUEXT_DEVRT_PACE_NONE 0u
#define GPUEXT_DEVRT_PACE_REQUEST 1u
#define GPUEXT_DEVRT_PACE_HOLD 2u
#define GPUEXT_DEVRT_PACE_HOLD_MAX_NS 5000000000ull
#define GPUEXT_DEVRT_PACE_DEPTH_MAX 16u

_Static_assert(sizeof(struct gpuext_devrt_slot) == 64, "slot layout");
_Static_assert(sizeof(struct gpuext_devrt_usage_header) == 256, "usage header layout");
_Static_assert(sizeof(struct gpuext_devrt_board) == 64, "board layout");
_Static_assert(sizeof(struct gpuext_devrt_usage) ==
		       256 + (64 + 8 * GPUEXT_DEVRT_MAX_DEVICES) * GPUEXT_DEVRT_SLOTS + 8 * GPUEXT_DEVRT_LAT_BUCKETS,
	       "usage layout");

#endif /* GPUEXT_DEVRT_SHM_H */
