/*
 * priority.c - the launch gate: latency-critical launches first.
 *
 * A latency-critical process records, in its own tenant's usage header, the
 * CLOCK_MONOTONIC deadline until which its last launch counts as pending
 * (launch time + the tenant's active window). The host publishes the latest
 * such deadline over all latency-critical tenants on the board ($GPUEXT_BOARD,
 * read-only here), each clamped to now + that tenant's window as the host
 * knows it. A best-effort process's launch waits while the board says
 * latency-critical work is pending, at most max_delay_ns, and counts the wait,
 * when its policy asks for that (launchGate; off by default: see
 * gpuext_devrt_tenant.h) and no MPS share confines it.
 * A latency-critical process that moves its deadline when the host may not
 * read it in time writes a byte to its tenant's wake FIFO (acct.c).
 * No process writes anywhere but its own tenant's files.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "devrt.h"
#include "gpuext_devrt_shm.h"
#include "gpuext_devrt_tenant.h" /* GPUEXT_DEVRT_MPS_PRIORITY_MAX */

static const struct gpuext_devrt_board *gx_board;
static _Atomic uint64_t gx_board_retry_ns;
static void gx_board_map(void)
{
	struct stat st;
	void *m;
	int fd = open(gx_cfg.board_path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(struct gpuext_devrt_board)) {
		m = mmap(NULL, sizeof(struct gpuext_devrt_board), PROT_READ, MAP_SHARED, fd, 0);
		if (m != MAP_FAILED)
			gx_board = m;
	}
	close(fd);
	if (gx_board)
		GX_DEBUG("board %s mapped", gx_cfg.board_path);
}

/*
 * Under an MPS server, a best-effort tenant's contexts are confined to
 * smPercent of the SMs of each GPU they use, so a latency-critical tenant
 * finds SMs free at once instead of waiting out a best-effort kernel, and run
 * at the policy's MPS client priority (below normal: the GPU dispatches the
 * latency-critical tenant's blocks first). MPS reads both when the context is
 * created; this runs on the first CUDA call, before the real cuInit. A value
 * the user set in the environment wins only when it asks for less: a tenant
 * cannot raise its own share or priority (review row 11).
 */
static int gx_mps_confined; /* SM share in force: the launch gate stands down */
static int gx_gated;        /* a best-effort process whose launches wait on the board */

/* Keeps the tenant's own value of env when it is a number in [lo, hi], else sets policy. */
static void gx_mps_env_clamp(const char *env, unsigned long lo, unsigned long hi, unsigned policy)
{
	const char *own = getenv(env);
	char *end = NULL, v[16];
	unsigned long want = own ? strtoul(own, &end, 10) : 0;

	if (own && *own && !*end && want >= lo && want <= hi)
		return;
	if (own)
		gx_log("%s=%.16s is not within the policy's %u: set to it", env, own, policy);
	snprintf(v, sizeof(v), "%u", policy);
	setenv(env, v, 1);
}

/* The share the host's latency controller chose for a best-effort context
 * created now (the board's be_sm_percent, 1..100, published while a
 * latency target is on the node), or 0: none. */
static uint32_t gx_board_be_share(void)
{
	uint32_t host;

	if (!gx_cfg.board_path || !*gx_cfg.board_path)
		return 0;
	if (!gx_board)
		gx_board_map();
	if (!gx_board || atomic_load_explicit(&gx_board->magic, memory_order_acquire) != GPUEXT_DEVRT_BOARD_MAGIC)
		return 0;
	host = atomic_load_explicit(&gx_board->be_sm_percent, memory_order_relaxed);
	return host >= 1 && host <= 100 ? host : 0;
}

static void gx_mps_share(void)
{
	const char *dir = getenv(GPUEXT_ENV_MPS_PIPE_DIRECTORY);
	char ctl[4096];
	uint32_t host, share, prio;

	if (gx_cfg.priority_class != GPUEXT_DEVRT_CLASS_BEST_EFFORT)
		return;
	host = gx_board_be_share();
	if (!gx_cfg.sm_percent && !gx_cfg.mps_client_priority && !host)
		return;
	/* Only with an MPS server to talk to (MPS's default pipe directory when
	 * the variable is unset); without one the share means nothing and the
	 * gate stays the isolation. */
	snprintf(ctl, sizeof(ctl), "%s/control", dir && *dir ? dir : "/tmp/nvidia-mps");
	if (access(ctl, F_OK) != 0) {
		gx_log("smPercent %u, mpsClientPriority %u set%s but no MPS server (%s): launch gate %s",
		       gx_cfg.sm_percent, gx_cfg.mps_client_priority, host ? " (and the host's share for new contexts)" : "", ctl,
		       gx_cfg.launch_gate ? "stays on" : "off (the policy has no launchGate): not isolated");
		return;
	}
	/* While a latency target is on the node the host's controller chooses
	 * for a context created now, from what runs on the GPU: a smaller
	 * share than the policy's (never a larger one), a share for a policy
	 * that set none, and the lowest client priority. */
	share = gx_cfg.sm_percent;
	prio = gx_cfg.mps_client_priority;
	if (host) {
		if (!share || host < share) {
			GX_DEBUG("smPercent %u: the host's controller chose %u for a context created now", share, host);
			share = host;
		}
		prio = GPUEXT_DEVRT_MPS_PRIORITY_MAX;
	}
	/* The tenant may ask for a smaller share (1..the one chosen) or a lower
	 * priority (the one chosen..lowest), never more: anything else of its
	 * own, malformed or zero share included, is replaced. */
	if (share) {
		gx_mps_env_clamp(GPUEXT_ENV_MPS_ACTIVE_THREAD_PERCENTAGE, 1, share, share);
		gx_mps_confined = 1;
	}
	gx_mps_env_clamp(GPUEXT_ENV_MPS_CLIENT_PRIORITY, prio, GPUEXT_DEVRT_MPS_PRIORITY_MAX, prio);
	GX_DEBUG("best-effort under MPS: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%s CUDA_MPS_CLIENT_PRIORITY=%s, launch gate %s",
		 getenv(GPUEXT_ENV_MPS_ACTIVE_THREAD_PERCENTAGE) ? getenv(GPUEXT_ENV_MPS_ACTIVE_THREAD_PERCENTAGE) : "unset",
		 getenv(GPUEXT_ENV_MPS_CLIENT_PRIORITY), gx_mps_confined ? "off" : gx_cfg.launch_gate ? "on" : "off (no launchGate)");
}

void gx_priority_open(void)
{
	gx_mps_share();
	gx_gated = gx_cfg.priority_class == GPUEXT_DEVRT_CLASS_BEST_EFFORT && gx_cfg.launch_gate && !gx_mps_confined;
	if (gx_cfg.priority_class == GPUEXT_DEVRT_CLASS_BEST_EFFORT)
		GX_DEBUG("best-effort: launch gate %s", gx_gated ? "on" : gx_mps_confined ? "off (MPS share)" : "off (no launchGate)");
	if (gx_cfg.priority_class == GPUEXT_DEVRT_CLASS_BEST_EFFORT && !gx_board && gx_cfg.board_path && *gx_cfg.board_path)
		gx_board_map(); /* the gate, and the host's pacing (be_pace), read it */
}

static uint64_t gx_board_deadline(void)
{
	if (!gx_board || atomic_load_explicit(&gx_board->magic, memory_order_acquire) != GPUEXT_DEVRT_BOARD_MAGIC)
		return 0;
	return atomic_load_explicit(&gx_board->lc_active_until_ns, memory_order_acquire);
}

static uint64_t gx_board_busy(void)
{
	if (!gx_board || atomic_load_explicit(&gx_board->magic, memory_order_acquire) != GPUEXT_DEVRT_BOARD_MAGIC)
		return 0;
	return atomic_load_explicit(&gx_board->lc_busy_until_ns, memory_order_acquire);
}

static void gx_sleep_ns(uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};

	nanosleep(&ts, NULL);
}

/*
 * A best-effort launch waited out max_delay_ns while latency-critical work
 * stayed pending: it goes when a latency-critical request has just ended,
 * where the gap to the next request is longest, not at whatever moment its
 * delay ran out (a 2 ms kernel started then overlaps the next request about
 * as often as it is long over the requests' period). It waits for the
 * request in progress to end or, between requests, for the next one to
 * begin and end; at most another max_delay_ns, and not once the board
 * shows nothing pending. A board without a request end (0: the
 * latency-critical work marks no requests, or its last began more than a
 * window before its deadline) sends the launch at once, as before. Returns
 * when it waited until.
 */
static uint64_t gx_wait_request_end(uint64_t now)
{
	uint64_t cap = now + gx_cfg.max_delay_ns, busy = gx_board_busy(), seen = busy;

	while (now < cap && now < gx_board_deadline()) {
		busy = gx_board_busy();
		if (busy > now)
			seen = 0; /* a request in progress: wait for its end */
		else if (seen == 0 || busy != seen)
			break;    /* the request seen in progress (or one begun since) has ended */
		gx_sleep_ns(busy > now && busy - now < 200000ull ? busy - now : 200000ull);
		now = gx_now_ns();
	}
	return now;
}

/*
 * A latency-critical process's wait for the GPU returned: its work is done
 * now, so its window counts from here. Without this a request that a
 * best-effort kernel held up (a 2 ms kernel can start in any gap) used up
 * its window while it waited, the deadline lapsed before the next request,
 * best-effort launches went in, and the next request waited too: one late
 * request turned into a regime of late ones.
 */
/*
 * A latency-critical request: from the first launch after a wait for the GPU
 * returned to the next such return. The usage file carries when the one in
 * progress is expected to end (its start + 1.5 x the running mean of the
 * earlier ones), which the board passes on to best-effort processes.
 */
static _Atomic uint64_t gx_lc_req_start; /* 0: no request in progress */
static _Atomic uint64_t gx_lc_req_mean;  /* ns, the running mean (1/8) of start to wait-return */

static void gx_lc_launch(uint64_t now)
{
	uint64_t none = 0, mean;

	/* a plain load first: launches inside a request only read the line */
	if (atomic_load_explicit(&gx_lc_req_start, memory_order_relaxed) == 0 &&
	    atomic_compare_exchange_strong(&gx_lc_req_start, &none, now)) {
		mean = atomic_load_explicit(&gx_lc_req_mean, memory_order_relaxed);
		gx_acct_lc_busy(now + (mean ? mean + mean / 2 : gx_cfg.lc_window_ns / 8));
	}
	gx_acct_lc_active(now); /* acct.c: the deadline the host publishes */
}

void gx_priority_synced(void)
{
	struct gpuext_devrt_usage *u;
	uint64_t now, start, mean, took;

	if (!gx_cfg.enabled)
		return; /* also before init: the class is standard (0) until the settings are read */
	u = gx_acct_usage();
	if (u)
		atomic_fetch_add_explicit(&u->hdr.synced, 1, memory_order_relaxed);
	if (gx_cfg.priority_class != GPUEXT_DEVRT_CLASS_LATENCY_CRITICAL)
		return;
	now = gx_now_ns();
	start = atomic_exchange(&gx_lc_req_start, 0);
	if (start && now > start) {
		took = now - start;
		mean = atomic_load_explicit(&gx_lc_req_mean, memory_order_relaxed);
		atomic_store_explicit(&gx_lc_req_mean, mean ? mean - mean / 8 + took / 8 : took, memory_order_relaxed);
		if (u) { /* the request's duration, for the host's latency controller */
			atomic_fetch_add_explicit(&u->lc_latency.bucket[gpuext_devrt_lat_bucket(took)], 1, memory_order_relaxed);
			atomic_fetch_add_explicit(&u->hdr.lc_request_ns, took, memory_order_relaxed);
			atomic_fetch_add_explicit(&u->hdr.lc_requests, 1, memory_order_release);
		}
	}
	gx_acct_lc_active(now);
}

/*
 * The pacing depth (board be_pace_depth): a paced best-effort process
 * records an event after each launch, on the launch's stream, in a ring;
 * a launch waits, at most max_delay_ns, until the launch depth places
 * before it has finished. A framework that queues a whole step ahead of the
 * GPU then has at most depth kernels left when a request begins. The ring
 * is the process's (launches from every thread, in the order they passed
 * here) and its first context's: a launch in another context, or into a
 * stream that is capturing a graph, neither waits nor records (an event
 * query would end the capture). A capture in global mode on another thread
 * while this one waits is not seen (the query may end it): docs/priority-control.md.
 */
typedef CUresult (*gx_pd_event_create)(CUevent *, unsigned int);
typedef CUresult (*gx_pd_event_record)(CUevent, CUstream);
typedef CUresult (*gx_pd_event_query)(CUevent);
typedef CUresult (*gx_pd_ctx_current)(CUcontext *);
typedef CUresult (*gx_pd_capturing)(CUstream, int *);
#define GX_PD_EVENT_DISABLE_TIMING 0x2 /* CU_EVENT_DISABLE_TIMING */
#define GX_PD_NOT_READY 600           /* CUDA_ERROR_NOT_READY */

static struct {
	pthread_mutex_t mu;
	int loaded, usable;
	gx_pd_event_create create;
	gx_pd_event_record record;
	gx_pd_event_query query;
	gx_pd_ctx_current current;
	gx_pd_capturing capturing;
	CUcontext ctx; /* the ring's context: its first paced launch's */
	CUevent ev[GPUEXT_DEVRT_PACE_DEPTH_MAX];
	uint64_t n;     /* launches recorded since depth took effect */
	uint32_t depth; /* the bound n counts under */
} gx_pd = {.mu = PTHREAD_MUTEX_INITIALIZER};
static __thread int gx_pd_armed; /* this thread's launch in progress is to be recorded */

static CUstream gx_pd_stream(CUstream s, int ptsz)
{
	return ptsz && !s ? GX_CU_STREAM_PER_THREAD : s;
}

/* Under gx_pd.mu: the driver entry points, once; 0 when any is missing. */
static int gx_pd_load(void)
{
	if (!gx_pd.loaded) {
		gx_pd.loaded = 1;
		gx_pd.create = (gx_pd_event_create)gx_driver_sym("cuEventCreate");
		gx_pd.record = (gx_pd_event_record)gx_driver_sym("cuEventRecord");
		gx_pd.query = (gx_pd_event_query)gx_driver_sym("cuEventQuery");
		gx_pd.current = (gx_pd_ctx_current)gx_driver_sym("cuCtxGetCurrent");
		gx_pd.capturing = (gx_pd_capturing)gx_driver_sym("cuStreamIsCapturing");
		gx_pd.usable = gx_pd.create && gx_pd.record && gx_pd.query && gx_pd.current && gx_pd.capturing;
		if (!gx_pd.usable)
			gx_log("pacing depth off: the driver lacks an event or capture entry point");
	}
	return gx_pd.usable;
}

/* Under gx_pd.mu: the launch goes to the ring's context and to a stream not capturing. */
static int gx_pd_ours(CUstream s)
{
	CUcontext cur = NULL;
	int capturing = 0;
	unsigned i;

	if (gx_pd.current(&cur) != CUDA_SUCCESS || !cur)
		return 0;
	if (!gx_pd.ctx) {
		for (i = 0; i < GPUEXT_DEVRT_PACE_DEPTH_MAX; i++)
			if (gx_pd.create(&gx_pd.ev[i], GX_PD_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
				gx_log("pacing depth off: cuEventCreate failed");
				gx_pd.usable = 0;
				return 0;
			}
		gx_pd.ctx = cur;
	}
	if (cur != gx_pd.ctx)
		return 0;
	/* an error (the legacy stream while a blocking stream captures) counts as capturing */
	return gx_pd.capturing(s, &capturing) == CUDA_SUCCESS && !capturing;
}

/* Waits until the launch depth places back has finished, at most max_delay_ns; returns ns waited. */
static uint64_t gx_pd_wait(uint32_t depth, CUstream s)
{
	uint64_t start, now, waited = 0;
	CUevent ev;
	int spins = 0;

	pthread_mutex_lock(&gx_pd.mu);
	if (!gx_pd_load() || !gx_pd_ours(s))
		goto out;
	if (depth != gx_pd.depth) { /* a new bound: count from here */
		gx_pd.depth = depth;
		gx_pd.n = 0;
	}
	gx_pd_armed = 1;
	if (gx_pd.n < depth)
		goto out;
	ev = gx_pd.ev[(gx_pd.n - depth) % GPUEXT_DEVRT_PACE_DEPTH_MAX];
	start = now = gx_now_ns();
	while (gx_pd.query(ev) == GX_PD_NOT_READY && now - start < gx_cfg.max_delay_ns) {
		if (++spins > 32) /* a short spin, then 20 us naps: the GPU keeps depth-1 queued meanwhile */
			gx_sleep_ns(20000ull);
		now = gx_now_ns();
	}
	waited = now - start;
out:
	pthread_mutex_unlock(&gx_pd.mu);
	return waited;
}

void gx_launch_done(CUstream s, int ptsz, CUresult r)
{
	if (!gx_pd_armed)
		return;
	gx_pd_armed = 0;
	if (r != CUDA_SUCCESS)
		return;
	pthread_mutex_lock(&gx_pd.mu);
	if (gx_pd.usable && gx_pd.ctx &&
	    gx_pd.record(gx_pd.ev[gx_pd.n % GPUEXT_DEVRT_PACE_DEPTH_MAX], gx_pd_stream(s, ptsz)) == CUDA_SUCCESS)
		gx_pd.n++;
	pthread_mutex_unlock(&gx_pd.mu);
}

/*
 * The host's pacing (board be_pace, set by its latency controller while a
 * latency-critical tenant misses its target): a best-effort launch waits
 * while a latency-critical request is in progress (the board's
 * lc_busy_until_ns), at most max_delay_ns, and, with be_pace_depth, until
 * at most that many of its earlier launches are unfinished. Unlike the gate
 * it does not wait out the whole active window, so a trainer whose launches
 * run ahead keeps launching between requests; and it changes at run time,
 * where an MPS share is fixed when the context is made.
 */
static void gx_pace(struct gpuext_devrt_usage *u, CUstream s, int ptsz)
{
	uint64_t now, start, busy, gpus, waited;
	uint32_t depth, pace;

	if (!gx_board || atomic_load_explicit(&gx_board->magic, memory_order_acquire) != GPUEXT_DEVRT_BOARD_MAGIC)
		return;
	pace = atomic_load_explicit(&gx_board->be_pace, memory_order_relaxed);
	if (pace != GPUEXT_DEVRT_PACE_REQUEST && pace != GPUEXT_DEVRT_PACE_HOLD)
		return;
	gpus = atomic_load_explicit(&gx_board->be_pace_gpus, memory_order_relaxed);
	if (gpus && gx_cfg.host_gpus && !(gpus & gx_cfg.host_gpus))
		return; /* the latency-critical tenants concerned are on other GPUs */
	if (pace == GPUEXT_DEVRT_PACE_HOLD) {
		/* the host measures a latency-critical tenant alone: no launch
		 * while it does, and never longer than the hold's bound */
		start = now = gx_now_ns();
		while (atomic_load_explicit(&gx_board->be_pace, memory_order_relaxed) == GPUEXT_DEVRT_PACE_HOLD &&
		       now - start < GPUEXT_DEVRT_PACE_HOLD_MAX_NS) {
			gx_sleep_ns(1000000ull);
			now = gx_now_ns();
		}
		waited = now - start;
		goto counted;
	}
	depth = atomic_load_explicit(&gx_board->be_pace_depth, memory_order_relaxed);
	waited = depth >= 1 && depth <= GPUEXT_DEVRT_PACE_DEPTH_MAX ? gx_pd_wait(depth, gx_pd_stream(s, ptsz)) : 0;
	start = now = gx_now_ns();
	busy = gx_board_busy();
	if (busy > now && now < gx_board_deadline()) {
		while (now < busy && now - start < gx_cfg.max_delay_ns) {
			uint64_t left = busy - now;

			gx_sleep_ns(left > 200000ull ? 200000ull : left);
			now = gx_now_ns();
			busy = gx_board_busy();
		}
		waited += now - start;
	}
counted:
	if (!waited)
		return;
	atomic_fetch_add(&u->hdr.delayed_launches, 1);
	atomic_fetch_add(&u->hdr.delayed_ns, waited);
	if (gx_acct_slot() >= 0)
		atomic_fetch_add(&u->slot[gx_acct_slot()].delayed, 1);
}

void gx_launch_gate(CUstream s, int ptsz)
{
	struct gpuext_devrt_usage *u;
	uint64_t now, until, start, waited;

	gx_runtime_init();
	u = gx_acct_usage();
	if (!gx_cfg.enabled || !u)
		return;
	atomic_fetch_add_explicit(&u->hdr.launches, 1, memory_order_relaxed);
	switch (gx_cfg.priority_class) {
	case GPUEXT_DEVRT_CLASS_LATENCY_CRITICAL:
		gx_lc_launch(gx_now_ns());
		return;
	case GPUEXT_DEVRT_CLASS_BEST_EFFORT:
		if (!gx_gated) {
			gx_pace(u, s, ptsz);
			return;
		}
		break;
	default:
		return;
	}
	if (!gx_board) {
		if (!gx_cfg.board_path || !*gx_cfg.board_path)
			return;
		now = gx_now_ns();
		if (now < atomic_load_explicit(&gx_board_retry_ns, memory_order_relaxed))
			return;
		atomic_store_explicit(&gx_board_retry_ns, now + 1000000000ull, memory_order_relaxed);
		gx_board_map();
		if (!gx_board)
			return;
	}
	start = now = gx_now_ns();
	until = gx_board_deadline();
	if (now >= until)
		return;
	while (now < until && now - start < gx_cfg.max_delay_ns) {
		uint64_t left = until - now, cap = gx_cfg.max_delay_ns - (now - start);
		uint64_t step = left < cap ? left : cap;

		gx_sleep_ns(step > 200000ull ? 200000ull : step); /* re-read the board every 200 us */
		now = gx_now_ns();
		until = gx_board_deadline();
	}
	if (now < until)
		now = gx_wait_request_end(now);
	waited = now - start;
	atomic_fetch_add(&u->hdr.delayed_launches, 1);
	atomic_fetch_add(&u->hdr.delayed_ns, waited);
	if (gx_acct_slot() >= 0)
		atomic_fetch_add(&u->slot[gx_acct_slot()].delayed, 1);
	GX_DEBUG("launch delayed %llu ns for latency-critical work", (unsigned long long)waited);
}
