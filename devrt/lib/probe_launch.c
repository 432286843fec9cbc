/*
 * probe_launch.c - the device probes on the launch path (probe_state.h):
 * images loaded before a context was current are bound at the next launch,
 * a library's kernel launched in another context gets that context's own
 * entry, and with launch_time the launch's host time (in the device's
 * clock) is written on the launch's stream. A launch never waits for the
 * probes' lock.
 */
#define _GNU_SOURCE
#include <stdlib.h>

#include "probe_state.h"

/* gx_probe_mu held: function handles may name other functions from now on. */
void gx_forget_launches(void)
{
	for (int i = 0; i < GX_LAUNCH_CACHE; i++)
		atomic_store(&gx_pr.launch_cache[i], 0);
}

/* The bound image whose module f belongs to, in the current context; NULL if none. */
static struct gx_pimage *gx_image_of(CUfunction f)
{
	uintptr_t key = (uintptr_t)f;
	size_t slot = (key >> 4) % GX_LAUNCH_CACHE;
	uint64_t c = atomic_load_explicit(&gx_pr.launch_cache[slot], memory_order_acquire);
	CUlibrary lib = NULL;
	CUmodule mod = NULL;
	int found = -1;

	if (c && (c >> 16) == key) {
		unsigned idx = (unsigned)(c & 0xffff);

		return idx == 0xffff ? NULL : gx_pr.images[idx - 1];
	}
	if (pthread_mutex_trylock(&gx_probe_mu) != 0)
		return NULL; /* this launch goes without a time; never wait */
	if (gx_drv.cuKernelGetLibrary && gx_drv.cuKernelGetLibrary(&lib, (CUkernel)f) == CUDA_SUCCESS && lib) {
		for (int i = 0; i < gx_pr.nimages && found < 0; i++)
			if (gx_pr.images[i]->is_library && gx_pr.images[i]->handle == (void *)lib)
				found = i;
	} else if (gx_drv.cuFuncGetModule && gx_drv.cuFuncGetModule(&mod, f) == CUDA_SUCCESS && mod) {
		for (int i = 0; i < gx_pr.nimages && found < 0; i++)
			if (gx_pr.images[i]->handle == (void *)mod || gx_pr.images[i]->ctx_module == mod)
				found = i;
	}
	if (key < (1ull << 48))
		atomic_store_explicit(&gx_pr.launch_cache[slot], ((uint64_t)key << 16) | (found < 0 ? 0xffffu : (unsigned)found + 1),
				      memory_order_release);
	pthread_mutex_unlock(&gx_probe_mu);
	return found < 0 ? NULL : gx_pr.images[found];
}

/*
 * The entry of a library image for context ctx: the chain's, or a new one,
 * bound now (never waiting: NULL when the lock is taken, try at the next
 * launch).
 */
static struct gx_pimage *gx_image_in_ctx(struct gx_pimage *first, CUcontext ctx)
{
	struct gx_pimage *im, *last = first, *n;
	int count = 0, mode;

	for (im = first; im; im = atomic_load_explicit(&im->next_ctx, memory_order_acquire)) {
		if (im->ctx == ctx)
			return im;
		last = im;
		count++;
	}
	if (!first->is_library || !(first->bound || first->gone) || count >= GX_PROBE_MAX_CTX ||
	    gx_pr.nimages >= GX_PROBE_MAX_IMAGES || pthread_mutex_trylock(&gx_probe_mu) != 0)
		return NULL; /* (nimages only grows: read unlocked, at worst a launch late) */
	for (im = first; im; im = atomic_load_explicit(&im->next_ctx, memory_order_acquire)) /* again, under the lock */
		if (im->ctx == ctx)
			break;
	if (!im && gx_pr.nimages < GX_PROBE_MAX_IMAGES && (n = calloc(1, sizeof(*n)))) {
		for (last = first; atomic_load(&last->next_ctx); last = atomic_load(&last->next_ctx))
			;
		n->index = first->index;
		n->is_library = 1;
		n->handle = first->handle;
		n->ptx = NULL; /* the first entry keeps the text */
		n->ctxn = last->ctxn + 1;
		mode = gx_capture_relax();
		gx_bind(n);
		gx_capture_restore(mode);
		gx_pr.images[gx_pr.nimages++] = n;
		atomic_store_explicit(&last->next_ctx, n, memory_order_release);
		gx_status(GX_ST_IMAGE "%d ctx=%d " GX_ST_STATE GX_ST_BOUND " context=%p", n->index, n->ctxn, (void *)ctx);
		im = n;
	}
	pthread_mutex_unlock(&gx_probe_mu);
	return im;
}

static void gx_launch_time(struct gx_pimage *im, CUstream stream, int ptsz)
{
	CUresult r;

	if (!im || !im->launch_ns)
		return; /* not a probed module */
	if (ptsz && !stream)
		stream = GX_CU_STREAM_PER_THREAD;
	{
		/*
		 * A launch into a capturing stream: the graph would replay this
		 * time with every launch. An error (the legacy stream while a
		 * blocking stream captures) is no launch time either.
		 */
		int capturing = 0;

		if (gx_drv.cuStreamIsCapturing && (gx_drv.cuStreamIsCapturing(stream, &capturing) != CUDA_SUCCESS || capturing))
			return;
	}
	/* in the device's clock (gx_clock_sync; 0 if it could not be measured) */
	cuuint64_t t = (cuuint64_t)(gx_realtime_ns() + atomic_load_explicit(&im->clock_offset, memory_order_relaxed));

	r = gx_drv.cuStreamWriteValue64_v2(stream, im->launch_ns, t, 0);
	/* and into the map elements the probes' hostWrites name (gx_host_writes) */
	for (size_t k = 0; r == CUDA_SUCCESS && k < gx_pr.conf.nhostw && k < GX_CONF_MAX_HOST_WRITES; k++)
		if (im->hostw_ptr[k])
			r = gx_drv.cuStreamWriteValue64_v2(stream, im->hostw_ptr[k], t, 0);
	if (r != CUDA_SUCCESS) {
		atomic_store(&gx_pr.launch_time_failed, 1); /* the next bind does not turn it back on */
		if (atomic_exchange(&gx_pr.launch_time, 0)) {
			gx_log("device probes: launch time off: cuStreamWriteValue64 failed (CUresult %d)", r);
			gx_status(GX_ST_IMAGE GX_ST_IMAGE_NONE " " GX_ST_LAUNCH_TIME GX_ST_OFF " " GX_ST_REASON "stream-write-failed:%d", r);
		}
	}
}

void gx_probe_before_launch(CUfunction f, CUstream stream, int ptsz)
{
	if (atomic_load_explicit(&gx_pr.pending, memory_order_relaxed) &&
	    pthread_mutex_trylock(&gx_probe_mu) == 0) { /* never make a launch wait: try again at the next one */
		int mode = gx_capture_relax(); /* the launch may go into a capturing stream */

		for (int i = 0; i < gx_pr.nimages; i++)
			if (!gx_pr.images[i]->bound && !gx_pr.images[i]->gone && gx_bind(gx_pr.images[i]) == 0)
				atomic_fetch_sub(&gx_pr.pending, 1);
		gx_capture_restore(mode);
		pthread_mutex_unlock(&gx_probe_mu);
	}
	if (f && (atomic_load_explicit(&gx_pr.launch_time, memory_order_relaxed) ||
		  atomic_load_explicit(&gx_pr.libraries, memory_order_relaxed))) {
		struct gx_pimage *im;
		CUcontext ctx = NULL;
		int lt = atomic_load_explicit(&gx_pr.launch_time, memory_order_relaxed);

		if (!gx_drv.cuCtxGetCurrent || gx_drv.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx)
			return;
		/* without launch times, only a launch in another context than the first needs the image */
		if (!lt && ctx == atomic_load_explicit(&gx_pr.first_ctx, memory_order_relaxed))
			return;
		if (!(im = gx_image_of(f)))
			return;
		if (im->ctx != ctx) /* a library's kernel in another context: that context's entry */
			im = gx_image_in_ctx(im, ctx);
		if (im && lt)
			gx_launch_time(im, stream, ptsz);
	}
}
