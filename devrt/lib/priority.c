/*
 * priority.c - the launch gate: latency-critical launches first.
 *
 * A latency-critical process records, in its own tenant's usage header, the
 * CLOCK_MONOTONIC deadline until which its last launch counts as pending
 * (launch time + the tenant's active window). The host publishes the latest
 * such deadline over all latency-critical tenants on the board ($GPUEXT_BOARD,
 * read-only here), each clamped to now + that tenant's window as the host
 * knows it. A best-effort process's launch waits while the board says
 * latency-critical work is pending, at most max_delay_ns, and counts the wait.
 * No process writes anywhere but its own tenant's files.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "devrt.h"
#include "gpuext_devrt_shm.h"

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
 * smPercent of the SMs, so a latency-critical tenant finds SMs free at once
 * instead of waiting out a best-effort kernel. MPS reads the share when the
 * context is created; this runs on the first CUDA call, before the real
 * cuInit. A value the user set in the environment wins only when it is
 * smaller: a tenant cannot raise its own share (review row 11).
 */
static int gx_mps_confined; /* SM share in force: the launch gate stands down */

static void gx_mps_share(void)
{
	const char *dir = getenv(GPUEXT_ENV_MPS_PIPE_DIRECTORY);
	char v[8], ctl[4096];

	if (gx_cfg.priority_class != GPUEXT_DEVRT_CLASS_BEST_EFFORT || !gx_cfg.sm_percent)
		return;
	/* Only with an MPS server to talk to (MPS's default pipe directory when
	 * the variable is unset); without one the share means nothing and the
	 * gate stays the isolation. */
	snprintf(ctl, sizeof(ctl), "%s/control", dir && *dir ? dir : "/tmp/nvidia-mps");
	if (access(ctl, F_OK) != 0) {
		gx_log("smPercent %u set but no MPS server (%s): launch gate stays on", gx_cfg.sm_percent, ctl);
		return;
	}
	/* The tenant may ask for less than its policy's share, never more: a
	 * larger, malformed or zero value of its own is replaced. */
	const char *own = getenv(GPUEXT_ENV_MPS_ACTIVE_THREAD_PERCENTAGE);
	char *end = NULL;
	unsigned long want = own ? strtoul(own, &end, 10) : 0;
	if (!own || !*own || *end || want == 0 || want > gx_cfg.sm_percent) {
		if (own)
			gx_log("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%.16s is not within the policy's share: %u", own,
			       gx_cfg.sm_percent);
		snprintf(v, sizeof(v), "%u", gx_cfg.sm_percent);
		setenv(GPUEXT_ENV_MPS_ACTIVE_THREAD_PERCENTAGE, v, 1);
	}
	gx_mps_confined = 1;
	GX_DEBUG("best-effort under MPS: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%s, launch gate off",
		 getenv(GPUEXT_ENV_MPS_ACTIVE_THREAD_PERCENTAGE));
}

void gx_priority_open(void)
{
	gx_mps_share();
	if (gx_cfg.priority_class == GPUEXT_DEVRT_CLASS_BEST_EFFORT && gx_cfg.board_path && *gx_cfg.board_path)
		gx_board_map();
}

static uint64_t gx_board_deadline(void)
{
	if (!gx_board || atomic_load_explicit(&gx_board->magic, memory_order_acquire) != GPUEXT_DEVRT_BOARD_MAGIC)
		return 0;
	return atomic_load_explicit(&gx_board->lc_active_until_ns, memory_order_acquire);
}

void gx_launch_gate(void)
{
	struct gpuext_devrt_usage *u;
	uint64_t now, until, start, waited;

	gx_runtime_init();
	u = gx_acct_usage();
	if (!gx_cfg.enabled || !u)
		return;
	atomic_fetch_add_explicit(&u->hdr.launches, 1, memory_order_relaxed);
	switch (gx_cfg.priority_class) {
	case GPUEXT_DEVRT_CLASS_LATENCY_CRITICAL: {
		uint64_t was = atomic_load_explicit(&u->hdr.lc_active_until_ns, memory_order_relaxed);

		now = gx_now_ns();
		until = now + gx_cfg.lc_window_ns;
		/* write only when it moves by 1/8 window: keeps the cache line quiet */
		if (until > was + gx_cfg.lc_window_ns / 8)
			atomic_store_explicit(&u->hdr.lc_active_until_ns, until, memory_order_release);
		return;
	}
	case GPUEXT_DEVRT_CLASS_BEST_EFFORT:
		if (gx_mps_confined)
			return;
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
		struct timespec ts;

		if (step > 200000ull)
			step = 200000ull; /* re-read the board every 200 us */
		ts.tv_sec = 0;
		ts.tv_nsec = (long)step;
		nanosleep(&ts, NULL);
		now = gx_now_ns();
		until = gx_board_deadline();
	}
	waited = now - start;
	atomic_fetch_add(&u->hdr.delayed_launches, 1);
	atomic_fetch_add(&u->hdr.delayed_ns, waited);
	if (gx_acct_slot() >= 0)
		atomic_fetch_add(&u->slot[gx_acct_slot()].delayed, 1);
	GX_DEBUG("launch delayed %llu ns for latency-critical work", (unsigned long long)waited);
}
