/*
 * probe_bind.c - binding a patched image in a context (device probes,
 * probe_state.h): its map symbols and __gpuext_launch_ns looked up, the
 * tenant id written to __gpuext_tenant_id, a non-blocking stream of our
 * own for the copies, the context's clock offset measured or taken from an
 * image bound there before; and the stream-capture mode the interposer's
 * own calls run in.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "probe_state.h"

/*
 * What bpftime's bpf_get_current_pid_tgid (helper 14) returns on the device:
 * a module global, present only when a program calls the helper, set at
 * bind to (tgid << 32) | tid, both in the process's own pid namespace, tid
 * the thread that binds the image (bpftime answers the device's call on
 * its host thread with its getpid() and that thread's gettid(); every
 * bpftime example uses only the upper half, the process).
 */
#define GX_SYM_PID_TGID GPUEXT_DEVRT_SYM_PID_TGID

static CUresult gx_get_global(struct gx_pimage *im, const char *name, CUdeviceptr *p, size_t *bytes)
{
	if (im->is_library)
		return gx_drv.cuLibraryGetGlobal ? gx_drv.cuLibraryGetGlobal(p, bytes, (CUlibrary)im->handle, name)
						 : CUDA_ERROR_NOT_FOUND;
	return gx_drv.cuModuleGetGlobal_v2 ? gx_drv.cuModuleGetGlobal_v2(p, bytes, (CUmodule)im->handle, name)
					   : CUDA_ERROR_NOT_FOUND;
}

/*
 * Stream capture: while an application captures a graph in GLOBAL mode (as
 * PyTorch does), a "potentially unsafe" call from any thread - a
 * synchronisation, a copy to pageable memory, a pinned allocation - fails
 * and invalidates the application's capture. The interposer's own calls
 * (binding, the clock kernel, copy-out) touch only its own stream and
 * memory, so they run in RELAXED mode: the copy thread for good, the
 * application's thread for the duration of the call.
 */
#define GX_CAPTURE_MODE_RELAXED 2

int gx_capture_relax(void)
{
	int mode = GX_CAPTURE_MODE_RELAXED;

	if (!gx_drv.cuThreadExchangeStreamCaptureMode || gx_drv.cuThreadExchangeStreamCaptureMode(&mode) != CUDA_SUCCESS)
		return -1;
	return mode;
}

void gx_capture_restore(int mode)
{
	if (mode >= 0 && gx_drv.cuThreadExchangeStreamCaptureMode)
		gx_drv.cuThreadExchangeStreamCaptureMode(&mode);
}

/*
 * module.conf's host_write lines (a probe's hostWrites): map elements the
 * interposer writes for the programs, as bpftime's host side does for its
 * device programs. Each u64 is looked up in ctx (its map's symbol, the
 * offset inside it); a launch-time element gets the launch time with
 * __gpuext_launch_ns (gx_launch_time), a clock-offset element is written
 * here once: %globaltimer - CLOCK_MONOTONIC, the measured device offset
 * (0 when the clock could not be measured) plus CLOCK_REALTIME -
 * CLOCK_MONOTONIC. Called after the clock was measured, with im->stream.
 */
static void gx_host_writes(struct gx_pimage *im)
{
	for (size_t k = 0; k < gx_pr.conf.nhostw && k < GX_CONF_MAX_HOST_WRITES; k++) {
		const struct gx_probe_hostw *h = &gx_pr.conf.hostw[k];
		const char *what = h->value == GX_HOSTW_CLOCK_OFFSET ? GPUEXT_DEVRT_HOSTW_CLOCK_OFFSET_NAME : GPUEXT_DEVRT_HOSTW_LAUNCH_TIME_NAME;
		CUdeviceptr p = 0;
		size_t bytes = 0;

		im->hostw_ptr[k] = 0;
		if (gx_get_global(im, h->symbol, &p, &bytes) != CUDA_SUCCESS || !p || h->offset + 8 > bytes) {
			gx_status(GX_ST_IMAGE "%d host_write=%s symbol=%s " GX_ST_STATE GX_ST_OFF " " GX_ST_REASON "%s", im->index, what, h->symbol,
				  p ? "offset-out-of-range" : "no-symbol");
			continue;
		}
		if (h->value == GX_HOSTW_LAUNCH_TIME) {
			im->hostw_ptr[k] = p + h->offset;
			gx_status(GX_ST_IMAGE "%d host_write=%s symbol=%s offset=%llu " GX_ST_STATE "on", im->index, what, h->symbol,
				  (unsigned long long)h->offset);
			continue;
		}
		{
			struct timespec mono;
			int64_t real = gx_realtime_ns(), v;

			clock_gettime(CLOCK_MONOTONIC, &mono);
			v = atomic_load(&im->clock_offset) + real - ((int64_t)mono.tv_sec * 1000000000 + mono.tv_nsec);
			if (im->stream && gx_drv.cuMemcpyHtoDAsync_v2 && gx_drv.cuStreamSynchronize &&
			    gx_drv.cuMemcpyHtoDAsync_v2(p + h->offset, &v, sizeof(v), im->stream) == CUDA_SUCCESS &&
			    gx_drv.cuStreamSynchronize(im->stream) == CUDA_SUCCESS)
				gx_status(GX_ST_IMAGE "%d host_write=%s symbol=%s offset=%llu " GX_ST_STATE "on value_ns=%lld clock=%s", im->index,
					  what, h->symbol, (unsigned long long)h->offset, (long long)v,
					  im->clock_synced > 0 ? "synced" : "unsynced");
			else
				gx_status(GX_ST_IMAGE "%d host_write=%s symbol=%s " GX_ST_STATE GX_ST_OFF " " GX_ST_REASON "copy-failed", im->index, what,
					  h->symbol);
		}
	}
}

/*
 * Looks the symbols up in the current context and writes the tenant id.
 * Called with gx_probe_mu held. 0: bound (or given up: reported); -1: no context yet.
 */
int gx_bind(struct gx_pimage *im)
{
	CUcontext ctx = NULL;
	CUdeviceptr tid = 0;
	size_t tid_bytes = 0, total = 0;
	uint32_t tenant = (uint32_t)gx_cfg.tenant_id;
	int found = 0;

	if (!gx_drv.cuCtxGetCurrent || gx_drv.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx)
		return -1;
	im->ctx = ctx;
	im->bound = 1;
	if (im->is_library && !im->ctxn) {
		atomic_fetch_add(&gx_pr.libraries, 1);
		im->lib_counted = 1;
	}
	{
		/*
		 * Once the first context ended (GX_CTX_ENDED) this is not re-armed:
		 * a library first bound there may run in any later context, and
		 * only the lookup at launch binds it there.
		 */
		CUcontext none = NULL;

		atomic_compare_exchange_strong(&gx_pr.first_ctx, &none, ctx);
	}
	if (!gx_drv.cuStreamCreate || gx_drv.cuStreamCreate(&im->stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
		/* (another context's entry is not another patched image) */
		gx_status(GX_ST_IMAGE "%d " GX_ST_STATE "%s " GX_ST_REASON "no-copy-stream", im->index, im->ctxn ? GX_ST_BOUND : GX_ST_PATCHED);
		im->stream = NULL;
		return 0;
	}
	for (size_t k = 0; k < gx_pr.conf.nmaps; k++) {
		const struct gx_probe_map *m = &gx_pr.conf.maps[k];
		CUdeviceptr p = 0;
		size_t bytes = 0;

		if (gx_get_global(im, m->symbol, &p, &bytes) != CUDA_SUCCESS || !p) {
			GX_DEBUG("probes: image %d has no map symbol %s", im->index, m->symbol);
			continue;
		}
		if (bytes != m->bytes)
			GX_DEBUG("probes: image %d map %s is %zu bytes, module.conf says %llu", im->index, m->symbol, bytes,
				 (unsigned long long)m->bytes);
		im->map_ptr[k] = p;
		im->map_bytes[k] = bytes < m->bytes ? bytes : m->bytes;
		total += (im->map_bytes[k] + 7) & ~(size_t)7;
		found++;
	}
	im->host_size = total;
	im->host = total ? malloc(total) : NULL;
	if (total && !im->host)
		im->stream = NULL; /* no copy-out; the probes still run */
	if (gx_pr.conf.launch_time) {
		size_t lb = 0;

		if (gx_get_global(im, GX_SYM_LAUNCH_NS, &im->launch_ns, &lb) != CUDA_SUCCESS || lb < 8)
			im->launch_ns = 0;
		if (im->is_library && gx_drv.cuLibraryGetModule &&
		    gx_drv.cuLibraryGetModule(&im->ctx_module, (CUlibrary)im->handle) != CUDA_SUCCESS)
			im->ctx_module = NULL;
		if (im->launch_ns && gx_drv.cuStreamWriteValue64_v2) {
			/* an image of a context already measured takes its offset */
			struct gx_pimage *owner = gx_clock_owner(ctx, gx_pr.nimages);

			if (owner && owner != im)
				gx_clock_copy(im, owner);
			else
				gx_clock_sync(im, "bind");
			if (!atomic_load(&gx_pr.launch_time_failed))
				atomic_store(&gx_pr.launch_time, 1);
			gx_host_writes(im);
		}
	}
	if (gx_get_global(im, GX_SYM_TENANT, &tid, &tid_bytes) == CUDA_SUCCESS && tid && tid_bytes >= 4 &&
	    gx_drv.cuMemcpyHtoDAsync_v2 && gx_drv.cuStreamSynchronize &&
	    gx_drv.cuMemcpyHtoDAsync_v2(tid, &tenant, sizeof(tenant), im->stream) == CUDA_SUCCESS)
		gx_drv.cuStreamSynchronize(im->stream);
	else
		GX_DEBUG("probes: image %d: tenant id not set", im->index);
	{
		CUdeviceptr pt = 0;
		size_t pt_bytes = 0;
		uint64_t pid_tgid = ((uint64_t)(uint32_t)getpid() << 32) | (uint32_t)syscall(SYS_gettid);

		if (gx_get_global(im, GX_SYM_PID_TGID, &pt, &pt_bytes) == CUDA_SUCCESS && pt && pt_bytes >= 8) {
			if (gx_drv.cuMemcpyHtoDAsync_v2 && gx_drv.cuStreamSynchronize &&
			    gx_drv.cuMemcpyHtoDAsync_v2(pt, &pid_tgid, sizeof(pid_tgid), im->stream) == CUDA_SUCCESS)
				gx_drv.cuStreamSynchronize(im->stream);
			else
				GX_DEBUG("probes: image %d: pid_tgid not set", im->index);
		}
	}
	GX_DEBUG("probes: image %d bound in context %p: %d of %zu maps, tenant %u", im->index, (void *)ctx, found,
		 gx_pr.conf.nmaps, tenant);
	return 0;
}
