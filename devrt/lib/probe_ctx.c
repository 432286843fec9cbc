/*
 * probe_ctx.c - contexts and images that end (device probes,
 * probe_state.h): cuCtxDestroy, the last release or a reset of a primary
 * context, cuLibraryUnload / cuModuleUnload. The images get a last copy of
 * their maps while their context still exists and are unbound for good.
 */
#define _GNU_SOURCE
#include <stdlib.h>

#include "probe_state.h"

/*
 * Contexts that end. A context the application destroys (cuCtxDestroy), or
 * a device's primary context released for the last time or reset, takes
 * its modules, our stream and the maps with it. Its images get a last copy
 * of their maps (final) while the context still exists and are unbound for
 * good, so neither the copy thread nor the exit handler uses the context
 * again: on the H200 a process that destroyed a context whose image was
 * bound aborted at exit ("free(): invalid pointer") when the exit handler
 * made the dead context current.
 */

/*
 * gx_probe_mu held. destroy_stream: the context still exists, our stream in
 * it goes now. missed: the final copy could not be made. A module's entry
 * loses its handle (its context took the module); a library's keeps it for
 * its other contexts.
 */
static void gx_unbind(struct gx_pimage *im, const char *why, int destroy_stream, int missed)
{
	if (destroy_stream && im->stream && gx_drv.cuStreamDestroy_v2)
		gx_drv.cuStreamDestroy_v2(im->stream);
	im->stream = NULL;
	im->bound = 0;
	im->gone = 1;
	im->ending = 0;
	im->ctx = NULL;
	im->launch_ns = 0;
	if (!im->is_library)
		im->handle = NULL;
	free(im->host);
	im->host = NULL;
	gx_status(GX_ST_IMAGE "%d ctx=%d " GX_ST_STATE GX_ST_UNBOUND " " GX_ST_REASON "%s%s copies=%llu", im->index, im->ctxn, why,
		  missed ? " " GX_ST_FINAL GX_ST_MISSED : "", (unsigned long long)im->seq);
}

/* gx_probe_mu held: no launch finds an image through the ended context. */
static void gx_forget_ctx(CUcontext ctx)
{
	CUcontext c = ctx;

	atomic_compare_exchange_strong(&gx_pr.first_ctx, &c, GX_CTX_ENDED);
	if (gx_pr.clock_mod_ctx == ctx) /* the module went with the context */
		gx_pr.clock_mod = NULL, gx_pr.clock_mod_ctx = NULL;
	gx_forget_launches();
}

/*
 * The bound images that end now: by handle (unloaded) or in ctx (its
 * context is destroyed, or, final_only, already ended). Each gets its final
 * copy, made in its own context while that still exists (or, final_only,
 * the copy made before written as the last), and is unbound. After the
 * exit handler (stopping) it made the final copies: they are only
 * unbound. The caller's capture mode and current context are kept.
 * gx_probe_mu held. Returns how many ended.
 */
static int gx_end_images(void *handle, CUcontext ctx, const char *why, int final_only)
{
	CUcontext cur = NULL;
	int mode = gx_capture_relax(), n = 0, switched = 0;

	if (gx_drv.cuCtxGetCurrent)
		gx_drv.cuCtxGetCurrent(&cur);
	for (int i = 0; i < gx_pr.nimages; i++) {
		struct gx_pimage *im = gx_pr.images[i];
		int missed = 0;

		if (!im->bound || (handle ? im->handle != handle : im->ctx != ctx))
			continue;
		if (final_only) {
			gx_write_maps(im, 1);
		} else if (!gx_pr.stopping) {
			missed = gx_copy_out(im, 1) != 0;
			switched = 1;
			GX_DEBUG("probes: image %d ctx %d %s: final copy %s", im->index, im->ctxn, why,
				 missed ? "failed (its context already ended?)" : "made");
		}
		gx_unbind(im, why, !final_only, missed);
		n++;
	}
	if (switched && gx_drv.cuCtxSetCurrent)
		gx_drv.cuCtxSetCurrent(cur);
	gx_capture_restore(mode);
	return n;
}

/*
 * Before cuLibraryUnload / cuModuleUnload of an image we patched (cudart
 * unloads its libraries in cudaDeviceReset and at exit): the maps are
 * module globals and go with it, so every context's entry of the image
 * gets its final copy now and is unbound. Afterwards a copy would read
 * freed device memory, or memory given to someone else.
 */
void gx_probe_unload(void *handle)
{
	if (!gx_pr.on || !handle)
		return;
	pthread_mutex_lock(&gx_probe_mu);
	GX_DEBUG("probes: image handle %p unloaded", handle);
	gx_end_images(handle, NULL, "unloaded", 0);
	for (int i = 0; i < gx_pr.nimages; i++) {
		struct gx_pimage *im = gx_pr.images[i];

		if (im->handle != handle)
			continue;
		if (!im->bound && !im->gone) { /* loaded, never bound: nothing to copy or bind any more */
			im->gone = 1;
			atomic_fetch_sub(&gx_pr.pending, 1);
		}
		if (im->lib_counted) {
			im->lib_counted = 0;
			atomic_fetch_sub(&gx_pr.libraries, 1);
		}
		free(im->ptx); /* the driver no longer loads from it */
		im->ptx = NULL;
		im->handle = NULL; /* a later load may get the same handle: a new image */
	}
	gx_forget_launches();
	pthread_mutex_unlock(&gx_probe_mu);
}

/* Before cuCtxDestroy(ctx). */
void gx_probe_ctx_destroy(CUcontext ctx)
{
	GX_DEBUG("probes: context %p destroyed", (void *)ctx);
	if (!gx_pr.on || !ctx)
		return;
	pthread_mutex_lock(&gx_probe_mu);
	if (gx_end_images(NULL, ctx, "context-destroyed", 0))
		gx_forget_ctx(ctx);
	pthread_mutex_unlock(&gx_probe_mu);
}

/*
 * Before cuDevicePrimaryCtxRelease/Reset(dev): the primary context's
 * handle (retained and released again, so the application's count is as
 * it was), its images' maps copied out; NULL when it is not active or no
 * image is bound. The release may not be the last: until
 * gx_probe_primary_after knows, the images are "ending", and the copy
 * thread leaves them alone (it would make a context current that the
 * release may be freeing).
 */
CUcontext gx_probe_primary_before(CUdevice dev)
{
	CUcontext p = NULL, cur = NULL;
	unsigned int flags = 0;
	int active = 0, mode, n = 0;

	GX_DEBUG("probes: primary context of device %d released or reset", (int)dev);
	if (!gx_pr.on || !gx_drv.cuDevicePrimaryCtxGetState || !gx_drv.cuDevicePrimaryCtxRetain ||
	    !gx_drv.cuDevicePrimaryCtxRelease_v2)
		return NULL;
	pthread_mutex_lock(&gx_probe_mu);
	if (gx_pr.nimages && gx_drv.cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && active &&
	    gx_drv.cuDevicePrimaryCtxRetain(&p, dev) == CUDA_SUCCESS) {
		gx_drv.cuDevicePrimaryCtxRelease_v2(dev);
		mode = gx_capture_relax();
		if (gx_drv.cuCtxGetCurrent)
			gx_drv.cuCtxGetCurrent(&cur);
		for (int i = 0; i < gx_pr.nimages; i++) {
			struct gx_pimage *im = gx_pr.images[i];

			if (!im->bound || im->ctx != p)
				continue;
			if (!gx_pr.stopping && gx_copy_out(im, 1) == 0)
				n++;
			im->ending = 1;
		}
		if (n && gx_drv.cuCtxSetCurrent)
			gx_drv.cuCtxSetCurrent(cur);
		gx_capture_restore(mode);
	}
	pthread_mutex_unlock(&gx_probe_mu);
	return p;
}

/* After cuDevicePrimaryCtxRelease/Reset(dev): if the primary context p ended, its images go. */
void gx_probe_primary_after(CUdevice dev, CUcontext p)
{
	unsigned int flags = 0;
	int active = 1;

	if (!p)
		return;
	pthread_mutex_lock(&gx_probe_mu);
	if (gx_drv.cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && !active) {
		gx_end_images(NULL, p, "primary-context-ended", 1);
		gx_forget_ctx(p);
	} else {
		for (int i = 0; i < gx_pr.nimages; i++)
			if (gx_pr.images[i]->ctx == p)
				gx_pr.images[i]->ending = 0;
	}
	pthread_mutex_unlock(&gx_probe_mu);
}
