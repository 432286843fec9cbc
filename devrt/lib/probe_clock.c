/*
 * probe_clock.c - the device's %globaltimer against the host's
 * CLOCK_REALTIME (device probes, probe_state.h): a one-thread kernel on our
 * own stream answers the host's stamps, per context, at bind, every
 * GX_CLOCK_RESYNC_S on the copy thread and at exit; launch times are
 * written in the device's clock.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>

#include "probe_state.h"

/*
 * The device's %globaltimer and the host's CLOCK_REALTIME are different
 * clocks: on the H200 the GPU's ran microseconds behind, more than a launch
 * takes, so launch latencies came out negative. gx_clock_sync measures the
 * offset the way NTP does, with a kernel of one thread on our own stream:
 * per round the host stamps h0, posts the round number in mapped pinned
 * memory, the kernel (polling it) answers with %globaltimer, and the host
 * stamps h1 when the answer lands; offset = g - (h0 + h1) / 2, within
 * +-(h1 - h0) / 2. The round with the shortest h1 - h0 wins (the first one
 * also waits for the kernel to start). Launch times are then written in
 * the device's clock: host time + offset.
 */
#define GX_CLOCK_ROUNDS 32
#define GX_CLOCK_START_NS 200000000ll /* the kernel has this long to start */
#define GX_CLOCK_ROUND_NS 20000000ll  /* then each answer this long (a late one is skipped) */
#define GX_CLOCK_MAX_MISSES 4         /* late answers before it stops */
#define GX_CLOCK_RESYNC_S 30          /* the copy thread measures again this often */

static const char gx_clock_ptx[] =
	".version 6.0\n"
	".target sm_70\n"
	".address_size 64\n"
	".visible .entry __gpuext_clock_sync(.param .u64 flag, .param .u64 out, .param .u32 n)\n"
	"{\n"
	"\t.reg .pred %p<3>;\n"
	"\t.reg .b32 %r<3>;\n"
	"\t.reg .b64 %rd<8>;\n"
	"\tld.param.u64 %rd1, [flag];\n"
	"\tld.param.u64 %rd2, [out];\n"
	"\tld.param.u32 %r1, [n];\n"
	"\tmov.u32 %r2, 0;\n"
	"$Lround:\n"
	"\tsetp.ge.u32 %p1, %r2, %r1;\n"
	"\t@%p1 bra $Ldone;\n"
	"\tadd.u32 %r2, %r2, 1;\n"
	"\tcvt.u64.u32 %rd3, %r2;\n"
	"$Lwait:\n"
	"\tld.volatile.global.u64 %rd4, [%rd1];\n"
	"\tsetp.lt.u64 %p2, %rd4, %rd3;\n"
	"\t@%p2 bra $Lwait;\n"
	"\tmov.u64 %rd5, %globaltimer;\n"
	"\tmul.wide.u32 %rd6, %r2, 8;\n"
	"\tadd.u64 %rd7, %rd2, %rd6;\n"
	"\tst.volatile.global.u64 [%rd7+-8], %rd5;\n"
	"\tmembar.sys;\n"
	"\tbra $Lround;\n"
	"$Ldone:\n"
	"\tret;\n"
	"}\n";

int64_t gx_realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/*
 * Measures im->clock_offset in im's context (current), on im->stream.
 * gx_probe_mu held. Writes one status line. 0: measured.
 */
static int gx_clock_measure(struct gx_pimage *im, const char *why)
{
	CUmodule m = NULL;
	CUfunction fn = NULL;
	volatile uint64_t *flag;
	volatile uint64_t *out;
	void *host = NULL;
	CUdeviceptr dflag = 0;
	unsigned int n = GX_CLOCK_ROUNDS;
	int64_t best_rtt = -1, best_off = 0, prev = atomic_load(&im->clock_offset);
	int answered = 0, started = 0, misses = 0;
	CUresult r;
	const char *fail = NULL;

	if (!gx_drv.cuModuleLoadData || !gx_drv.cuModuleGetFunction || !gx_drv.cuLaunchKernel ||
	    !gx_drv.cuMemHostAlloc || !gx_drv.cuMemHostGetDevicePointer_v2 || !gx_drv.cuMemFreeHost ||
	    !gx_drv.cuStreamSynchronize || !im->stream) {
		gx_status(GX_ST_IMAGE "%d clock=unsynced " GX_ST_REASON "driver-calls-missing", im->index);
		return -1;
	}
	if (gx_pr.clock_mod && gx_pr.clock_mod_ctx == im->ctx) {
		m = gx_pr.clock_mod;
	} else if ((r = gx_drv.cuModuleLoadData(&m, gx_clock_ptx)) != CUDA_SUCCESS) {
		gx_status(GX_ST_IMAGE "%d clock=unsynced " GX_ST_REASON "module-load-failed:%d", im->index, r);
		return -1;
	} else if (!gx_pr.clock_mod) {
		gx_pr.clock_mod = m, gx_pr.clock_mod_ctx = im->ctx;
	}
	if ((r = gx_drv.cuModuleGetFunction(&fn, m, "__gpuext_clock_sync")) != CUDA_SUCCESS)
		fail = "no-function";
	else if ((r = gx_drv.cuMemHostAlloc(&host, (1 + GX_CLOCK_ROUNDS) * 8,
					    CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)) != CUDA_SUCCESS || !host)
		fail = "host-alloc-failed";
	else if ((r = gx_drv.cuMemHostGetDevicePointer_v2(&dflag, host, 0)) != CUDA_SUCCESS)
		fail = "no-device-pointer";
	if (fail) {
		gx_status(GX_ST_IMAGE "%d clock=unsynced " GX_ST_REASON "%s:%d", im->index, fail, r);
		if (host)
			gx_drv.cuMemFreeHost(host);
		if (m != gx_pr.clock_mod && gx_drv.cuModuleUnload)
			gx_drv.cuModuleUnload(m);
		return -1;
	}
	flag = (volatile uint64_t *)host;
	out = flag + 1;
	memset(host, 0, (1 + GX_CLOCK_ROUNDS) * 8);
	{
		CUdeviceptr dout = dflag + 8;
		void *params[] = {&dflag, &dout, &n};

		r = gx_drv.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, im->stream, params, NULL);
	}
	if (r != CUDA_SUCCESS) {
		gx_status(GX_ST_IMAGE "%d clock=unsynced " GX_ST_REASON "launch-failed:%d", im->index, r);
		gx_drv.cuMemFreeHost(host);
		if (m != gx_pr.clock_mod && gx_drv.cuModuleUnload)
			gx_drv.cuModuleUnload(m);
		return -1;
	}
	for (unsigned int i = 1; i <= n && misses < GX_CLOCK_MAX_MISSES; i++) {
		int64_t h0 = gx_realtime_ns(), h1 = h0, limit = started ? GX_CLOCK_ROUND_NS : GX_CLOCK_START_NS;
		uint64_t g;

		__atomic_store_n(flag, (uint64_t)i, __ATOMIC_SEQ_CST);
		while ((g = __atomic_load_n(&out[i - 1], __ATOMIC_ACQUIRE)) == 0 && (h1 = gx_realtime_ns()) - h0 < limit)
			;
		h1 = gx_realtime_ns();
		if (!g) {
			/*
			 * Late (this thread or the GPU was busy): the round is
			 * skipped; the kernel answers it when it can and goes on
			 * to the next number posted. Not started at all: give up.
			 */
			if (!started)
				break;
			misses++;
			continue;
		}
		started = 1;
		answered++;
		if (best_rtt < 0 || h1 - h0 < best_rtt) {
			best_rtt = h1 - h0;
			best_off = (int64_t)(g - (uint64_t)h0) - (h1 - h0) / 2;
		}
	}
	if (__atomic_load_n(&out[n - 1], __ATOMIC_ACQUIRE) == 0) {
		/* the kernel has not finished: let it finish whenever it runs; its memory stays */
		__atomic_store_n(flag, UINT64_MAX, __ATOMIC_SEQ_CST);
		if (!answered)
			gx_status(GX_ST_IMAGE "%d clock=unsynced why=%s " GX_ST_REASON "kernel-did-not-start", im->index, why);
	} else {
		gx_drv.cuStreamSynchronize(im->stream);
		gx_drv.cuMemFreeHost(host);
		if (m != gx_pr.clock_mod && gx_drv.cuModuleUnload) /* another context's copy */
			gx_drv.cuModuleUnload(m);
	}
	if (!answered)
		return -1;
	atomic_store(&im->clock_offset, best_off);
	clock_gettime(CLOCK_MONOTONIC, &im->clock_at);
	gx_status(GX_ST_IMAGE "%d clock=synced why=%s offset_ns=%lld error_ns=%lld rounds=%d/%u drift_ns=%lld", im->index, why,
		  (long long)best_off, (long long)(best_rtt + 1) / 2, answered, n,
		  im->clock_synced > 0 ? (long long)(best_off - prev) : 0ll);
	GX_DEBUG("probes: image %d: device clock - host clock = %lld ns (+-%lld, %d rounds, %s)", im->index,
		 (long long)best_off, (long long)(best_rtt + 1) / 2, answered, why);
	im->clock_synced = 1;
	return 0;
}

/*
 * gx_clock_measure, and a failure remembered: a measurement can wait up to
 * GX_CLOCK_START_NS for a GPU that is busy, so the context's other binds
 * (on the application's launch path) take the failure instead of trying
 * again, and the copy thread retries every GX_CLOCK_RESYNC_S. A context
 * measured before keeps its last offset.
 */
int gx_clock_sync(struct gx_pimage *im, const char *why)
{
	if (gx_clock_measure(im, why) == 0)
		return 0;
	if (im->clock_synced <= 0)
		im->clock_synced = -1;
	clock_gettime(CLOCK_MONOTONIC, &im->clock_at);
	return -1;
}

/*
 * The clock offset is the context's: one image per context measures it
 * (the first of gx_pr.images[0..n) bound there with launch times), the
 * others copy it. gx_probe_mu held.
 */
struct gx_pimage *gx_clock_owner(CUcontext ctx, int n)
{
	for (int i = 0; i < n; i++)
		if (gx_pr.images[i]->ctx == ctx && gx_pr.images[i]->launch_ns && gx_pr.images[i]->clock_synced)
			return gx_pr.images[i];
	return NULL;
}

void gx_clock_copy(struct gx_pimage *im, const struct gx_pimage *owner)
{
	atomic_store(&im->clock_offset, atomic_load(&owner->clock_offset));
	im->clock_at = owner->clock_at;
	im->clock_synced = owner->clock_synced;
}

/*
 * Measures the clock offset again in each context with launch times, once
 * GX_CLOCK_RESYNC_S have passed since the last time (or now: final, at
 * exit, so the status file shows the drift over the run). The images of a
 * context share the result. gx_probe_mu held.
 */
void gx_clock_resync(int final)
{
	struct timespec now;

	if (!atomic_load(&gx_pr.launch_time) || !gx_drv.cuCtxSetCurrent)
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	for (int i = 0; i < gx_pr.nimages; i++) {
		struct gx_pimage *im = gx_pr.images[i], *owner;

		if (!im->bound || !im->launch_ns || !im->clock_synced)
			continue;
		owner = gx_clock_owner(im->ctx, i); /* measured earlier in this pass, or now */
		if (owner) {
			gx_clock_copy(im, owner);
		} else if ((final ? im->clock_synced > 0 : now.tv_sec - im->clock_at.tv_sec >= GX_CLOCK_RESYNC_S) &&
			   gx_drv.cuCtxSetCurrent(im->ctx) == CUDA_SUCCESS) {
			gx_clock_sync(im, final ? "exit" : "periodic");
		}
	}
}
