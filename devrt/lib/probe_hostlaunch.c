/*
 * probe_hostlaunch.c - every kernel launch, observed the way it can be
 * (docs/device-probes.md, "What is measured where"). With device probes on,
 * the interposer sees every launch, patched image or not. Per kernel (its
 * launch handle) it counts launches and blocks from the launch arguments,
 * keeps the last and largest grid and block, and says how the kernel is
 * observed: "device" when its image carries the probes (their maps count it)
 * or "host" when the image could not be patched (with the image's reason:
 * sass-only, ptx-newer-than-device, compressed-ptx, jit-failed...) or the
 * kernel is not in the probed list. With launch times on (launch-latency),
 * a host-measured launch of a probed kernel (in the list, or any kernel when
 * there is no list) also gets an event recorded after it on its own stream;
 * its completion, read without waiting (cuEventQuery), against an
 * epoch event calibrated on the interposer's own stream, gives the launch's
 * latency from the launch call to the kernel's completion. At most
 * GX_HL_EVENTS events per context are in flight; a launch that finds none
 * free goes without a latency (counted). Graph replays (cuGraphLaunch) count
 * the kernel nodes the graph had when it was instantiated; launches into a
 * capturing stream are not launches (the replays count them).
 *
 * The table goes to $GPUEXT_TENANT_ACCT/probes/<pid>.launches
 * (gpuext_devrt_launches.h) from the copy thread every second and at exit.
 * A launch never waits for a lock: it claims its kernel's slot with one
 * compare-and-swap and adds with atomics; whatever needs a lock (the
 * kernel's image, the events) is tried and, when taken, left for the next
 * launch or the copy thread.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpuext_devrt_launches.h"
#include "probe_state.h"

typedef struct gx_CUgraphNode_st *CUgraphNode;

/* driver calls of this file only (not hooked) */
#define GX_HL_CALLS(X)                                                                     \
	X(cuKernelGetName, (const char **name, CUkernel k))                                \
	X(cuFuncGetName, (const char **name, CUfunction f))                                \
	X(cuEventCreate, (CUevent * ev, unsigned int flags))                               \
	X(cuEventRecord, (CUevent ev, CUstream s))                                         \
	X(cuEventQuery, (CUevent ev))                                                      \
	X(cuEventSynchronize, (CUevent ev))                                                \
	X(cuEventElapsedTime, (float *ms, CUevent start, CUevent end))                     \
	X(cuEventDestroy_v2, (CUevent ev))                                                 \
	X(cuGraphGetNodes, (CUgraph g, CUgraphNode * nodes, size_t * n))                   \
	X(cuGraphNodeGetType, (CUgraphNode node, int *type))                               \
	X(cuGraphKernelNodeGetParams_v2, (CUgraphNode node, void *params))                 \
	X(cuGraphChildGraphNodeGetGraph, (CUgraphNode node, CUgraph * g))

#define GX_HL_TYPE(name, params) typedef CUresult (*gx_hl_##name) params;
GX_HL_CALLS(GX_HL_TYPE)
#undef GX_HL_TYPE
static struct {
#define GX_HL_FIELD(name, params) gx_hl_##name name;
	GX_HL_CALLS(GX_HL_FIELD)
#undef GX_HL_FIELD
} gx_hld;

#define CUDA_ERROR_NOT_READY 600
#define GX_GRAPH_NODE_KERNEL 0
#define GX_GRAPH_NODE_GRAPH 5

#define GX_HL_SLOTS 2048        /* kernels: open addressing by launch handle */
#define GX_HL_MAX_KERNELS 1536  /* claimed at most: probes stay short */
#define GX_HL_PROBE 32          /* slots a lookup looks at */
#define GX_HL_EVENTS 64         /* latency events in flight per context */
#define GX_HL_CTXS 16           /* contexts measured */
#define GX_HL_REAP 4            /* events a launch looks at */
#define GX_HL_GRAPHS 512        /* instantiated graphs remembered */
#define GX_HL_GRAPH_NODES 65536 /* nodes read of one graph (children included) */
#define GX_HL_GRAPH_DEPTH 8
#define GX_HL_EPOCH_NS 2000000000ll /* the epoch event is renewed every 2 s (float ms keep 0.1 us) */
#define GX_HL_UNSEEN_IMAGE "image-not-seen"
#define GX_HL_NOT_LISTED "kernel-not-listed"
#define GX_HL_TABLE_FULL "kernel-table-full"
#define GX_HL_GRAPH_NOT_SEEN "graph-not-instantiated-seen"
#define GX_HL_GRAPH_NODES_UNREAD "graph-nodes-unreadable"

struct gx_hl_kernel {
	_Atomic uintptr_t fn;     /* 0: free; set once by the launch that claims the slot */
	_Atomic uint32_t measured; /* 0 until classified (gx_probe_mu held), then GPUEXT_DEVRT_MEASURED_* */
	uint64_t kernel_id;
	uint32_t name_len, image;
	char name[GPUEXT_DEVRT_LAUNCHES_NAME_SIZE];
	char reason[GPUEXT_DEVRT_LAUNCHES_REASON_SIZE];
	_Atomic uint64_t launches, graph_launches, blocks, max_blocks;
	_Atomic uint32_t max_threads;
	_Atomic uint32_t grid[3], block[3];
	_Atomic uint64_t lat_count, lat_sum, lat_min, lat_max;
	int listed; /* in the probed-kernel list (or there is none): set before measured */
};

/* what an unpatched image's launches are measured with: its status reason */
struct gx_hl_image {
	void *handle;
	int index;
	char reason[GPUEXT_DEVRT_LAUNCHES_REASON_SIZE];
};

struct gx_hl_slot {
	CUevent ev;
	struct gx_hl_kernel *k; /* NULL: free */
	int64_t t_launch;
	int epoch; /* 0 or 1: the epoch it is measured against */
};

struct gx_hl_ctx {
	CUcontext ctx; /* NULL: free */
	CUstream stream;
	CUevent epoch[2];
	int64_t epoch_ns[2];
	int cur;      /* the epoch new events use */
	int64_t at;   /* when epoch[cur] was taken, CLOCK_MONOTONIC ns */
	int failed;   /* events do not work here: no latency in this context */
	struct gx_hl_slot slot[GX_HL_EVENTS];
	int next;     /* the slot a launch looks at next */
};

struct gx_hl_gnode {
	struct gx_hl_kernel *k;
	uint64_t count, blocks;
};

struct gx_hl_graph {
	CUgraphExec exec; /* NULL: free */
	int n;
	uint64_t unread; /* nodes per replay that are kernels the interposer could not read */
	struct gx_hl_gnode *nodes;
};

static struct {
	int on, latency;
	struct gx_hl_kernel k[GX_HL_SLOTS];
	_Atomic int nkernels;
	_Atomic uint64_t full_launches, full_blocks; /* launches of kernels past GX_HL_MAX_KERNELS */
	_Atomic uint64_t graph_launches, graph_unseen, graph_unread;
	_Atomic uint64_t lat_skipped, lat_calib_ns;
	_Atomic uint64_t hist[GPUEXT_DEVRT_LAUNCHES_HIST];
	struct gx_hl_image img[GX_PROBE_MAX_IMAGES]; /* gx_probe_mu */
	int nimg;
	struct gx_hl_ctx ctx[GX_HL_CTXS]; /* gx_hl_ev_mu */
	struct gx_hl_graph graph[GX_HL_GRAPHS]; /* gx_hl_graph_mu */
	int graph_next;
	uint64_t seq;
	int thread_asked;
} gx_hl;

static pthread_mutex_t gx_hl_ev_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t gx_hl_graph_mu = PTHREAD_RWLOCK_INITIALIZER;

static int64_t gx_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* the kernel id of the device probes (gpuext_devrt_probes.h, gpubpf/abi.KernelID) */
static uint64_t gx_fnv(const char *s)
{
	return gpuext_devrt_kernel_id(s, strlen(s));
}

static void gx_copy_text(char *dst, size_t size, const char *src)
{
	size_t i = 0;

	for (; src && src[i] && i + 1 < size; i++)
		dst[i] = (src[i] > ' ' && src[i] < 0x7f) ? src[i] : '_';
	memset(dst + i, 0, size - i);
}

/* gx_probe_mu held (probe_load.c, once the driver calls are loaded) */
void gx_hl_init(void)
{
#define GX_HL_LOAD(name, params) gx_hld.name = (gx_hl_##name)gx_driver_sym(#name);
	GX_HL_CALLS(GX_HL_LOAD)
#undef GX_HL_LOAD
	if (!gx_hld.cuGraphKernelNodeGetParams_v2)
		gx_hld.cuGraphKernelNodeGetParams_v2 =
			(gx_hl_cuGraphKernelNodeGetParams_v2)gx_driver_sym("cuGraphKernelNodeGetParams");
	{
		/* CUDA 12.8+ has a _v2 (same arguments); prefer it where the driver exports both */
		gx_hl_cuEventElapsedTime v2 = (gx_hl_cuEventElapsedTime)gx_driver_sym("cuEventElapsedTime_v2");

		if (v2)
			gx_hld.cuEventElapsedTime = v2;
	}
	if (!gx_hld.cuEventDestroy_v2)
		gx_hld.cuEventDestroy_v2 = (gx_hl_cuEventDestroy_v2)gx_driver_sym("cuEventDestroy");
	gx_hl.latency = gx_pr.conf.launch_time && gx_hld.cuEventCreate && gx_hld.cuEventRecord &&
			gx_hld.cuEventQuery && gx_hld.cuEventSynchronize && gx_hld.cuEventElapsedTime &&
			gx_hld.cuEventDestroy_v2 && gx_drv.cuStreamCreate && gx_drv.cuStreamIsCapturing;
	gx_hl.on = 1;
}

/* An image loaded unchanged (probe_load.c): its kernels' launches are host-measured for this reason. */
void gx_hl_unpatched(void *handle, int index, const char *reason)
{
	if (!gx_hl.on || !handle)
		return;
	pthread_mutex_lock(&gx_probe_mu);
	if (gx_hl.nimg < GX_PROBE_MAX_IMAGES) {
		struct gx_hl_image *im = &gx_hl.img[gx_hl.nimg++];

		im->handle = handle;
		im->index = index;
		gx_copy_text(im->reason, sizeof(im->reason), reason);
	}
	pthread_mutex_unlock(&gx_probe_mu);
}

/* 1 if the probed-kernel list (module.conf's kernel lines) has name, or there is none. */
static int gx_hl_listed(const char *name)
{
	if (!gx_pr.conf.opts.nkernels)
		return 1;
	for (size_t i = 0; i < gx_pr.conf.opts.nkernels; i++)
		if (!strcmp(gx_pr.conf.opts.kernels[i], name))
			return 1;
	return 0;
}

/* The kernel's name, image and how it is observed. gx_probe_mu held. */
static void gx_hl_classify(struct gx_hl_kernel *k)
{
	uintptr_t f = atomic_load(&k->fn);
	CUlibrary lib = NULL;
	CUmodule mod = NULL;
	const char *name = NULL;
	void *handle = NULL;
	uint32_t measured = GPUEXT_DEVRT_MEASURED_HOST;
	const char *reason = GX_HL_UNSEEN_IMAGE;

	if (atomic_load(&k->measured))
		return;
	if (gx_drv.cuKernelGetLibrary && gx_drv.cuKernelGetLibrary(&lib, (CUkernel)f) == CUDA_SUCCESS && lib) {
		handle = lib;
		if (gx_hld.cuKernelGetName && gx_hld.cuKernelGetName(&name, (CUkernel)f) != CUDA_SUCCESS)
			name = NULL;
	} else {
		if (gx_drv.cuFuncGetModule && gx_drv.cuFuncGetModule(&mod, (CUfunction)f) == CUDA_SUCCESS)
			handle = mod;
		if (gx_hld.cuFuncGetName && gx_hld.cuFuncGetName(&name, (CUfunction)f) != CUDA_SUCCESS)
			name = NULL;
	}
	if (!name)
		name = "(unnamed)";
	k->listed = gx_hl_listed(name);
	k->name_len = (uint32_t)strnlen(name, 1u << 20);
	k->kernel_id = gx_fnv(name);
	gx_copy_text(k->name, sizeof(k->name), name);
	k->image = 0xffffffffu;
	for (int i = 0; handle && i < gx_pr.nimages; i++) {
		struct gx_pimage *im = gx_pr.images[i];

		if (im->handle == handle || (mod && im->ctx_module == mod)) {
			k->image = (uint32_t)im->index;
			if (k->listed)
				measured = GPUEXT_DEVRT_MEASURED_DEVICE, reason = "ok";
			else
				reason = GX_HL_NOT_LISTED;
			break;
		}
	}
	for (int i = 0; handle && k->image == 0xffffffffu && i < gx_hl.nimg; i++)
		if (gx_hl.img[i].handle == handle) {
			k->image = (uint32_t)gx_hl.img[i].index;
			reason = gx_hl.img[i].reason;
		}
	gx_copy_text(k->reason, sizeof(k->reason), reason);
	atomic_store_explicit(&k->measured, measured, memory_order_release);
}

/* The kernel of launch handle f: found, or claimed now; NULL when the table is full. */
static struct gx_hl_kernel *gx_hl_kernel_of(uintptr_t f)
{
	size_t h = (size_t)((f >> 4) * 0x9e3779b97f4a7c15ull) % GX_HL_SLOTS;

	for (int i = 0; i < GX_HL_PROBE; i++) {
		struct gx_hl_kernel *k = &gx_hl.k[(h + (size_t)i) % GX_HL_SLOTS];
		uintptr_t cur = atomic_load_explicit(&k->fn, memory_order_acquire), zero = 0;

		if (cur == f)
			return k;
		if (cur)
			continue;
		if (atomic_load_explicit(&gx_hl.nkernels, memory_order_relaxed) >= GX_HL_MAX_KERNELS)
			return NULL;
		if (atomic_compare_exchange_strong(&k->fn, &zero, f)) {
			atomic_fetch_add(&gx_hl.nkernels, 1);
			return k;
		}
		if (zero == f)
			return k; /* another thread claimed it for the same kernel */
	}
	return NULL;
}

static void gx_hl_max(_Atomic uint64_t *m, uint64_t v)
{
	uint64_t cur = atomic_load_explicit(m, memory_order_relaxed);

	while (v > cur && !atomic_compare_exchange_weak_explicit(m, &cur, v, memory_order_relaxed, memory_order_relaxed))
		;
}

static void gx_hl_count(struct gx_hl_kernel *k, uint64_t n, uint64_t blocks_each, const unsigned g[3],
			const unsigned b[3], int graph)
{
	uint64_t threads = (uint64_t)b[0] * b[1] * b[2];
	uint32_t cur = atomic_load_explicit(&k->max_threads, memory_order_relaxed);

	atomic_fetch_add_explicit(&k->launches, n, memory_order_relaxed);
	if (graph)
		atomic_fetch_add_explicit(&k->graph_launches, n, memory_order_relaxed);
	atomic_fetch_add_explicit(&k->blocks, n * blocks_each, memory_order_relaxed);
	gx_hl_max(&k->max_blocks, blocks_each);
	while (threads > cur && threads <= 0xffffffffu &&
	       !atomic_compare_exchange_weak_explicit(&k->max_threads, &cur, (uint32_t)threads, memory_order_relaxed,
						      memory_order_relaxed))
		;
	for (int i = 0; i < 3; i++) {
		atomic_store_explicit(&k->grid[i], g[i], memory_order_relaxed);
		atomic_store_explicit(&k->block[i], b[i], memory_order_relaxed);
	}
}

/* ---- latency: events after host-measured launches ---- */

static void gx_hl_hist_add(struct gx_hl_kernel *k, int64_t lat)
{
	uint64_t v = lat > 0 ? (uint64_t)lat : 0, cur;
	int b = v ? 63 - __builtin_clzll(v) : 0;

	atomic_fetch_add_explicit(&gx_hl.hist[b], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&k->lat_count, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&k->lat_sum, v, memory_order_relaxed);
	gx_hl_max(&k->lat_max, v);
	cur = atomic_load_explicit(&k->lat_min, memory_order_relaxed);
	while ((cur == 0 || v < cur) &&
	       !atomic_compare_exchange_weak_explicit(&k->lat_min, &cur, v ? v : 1, memory_order_relaxed, memory_order_relaxed))
		;
}

/*
 * Takes epoch e of c: an event recorded on our own idle stream, waited for,
 * its time taken as the middle of the round trip (the best of three): a
 * latency read against it is off by at most half the round trip
 * (lat_calib_ns). c->ctx current; gx_hl_ev_mu held.
 */
static int gx_hl_epoch(struct gx_hl_ctx *c, int e)
{
	int64_t best = -1, at = 0;

	if (!c->epoch[e] && gx_hld.cuEventCreate(&c->epoch[e], 0) != CUDA_SUCCESS)
		return -1;
	for (int i = 0; i < 3; i++) {
		int64_t t0 = gx_realtime_ns(), t1;

		if (gx_hld.cuEventRecord(c->epoch[e], c->stream) != CUDA_SUCCESS ||
		    gx_hld.cuEventSynchronize(c->epoch[e]) != CUDA_SUCCESS)
			return -1;
		t1 = gx_realtime_ns();
		if (best < 0 || t1 - t0 < best)
			best = t1 - t0, at = t0 + (t1 - t0) / 2;
	}
	/* the last record is the one read against: its round trip is at most 3x the best, keep the last's middle */
	c->epoch_ns[e] = at;
	atomic_store(&gx_hl.lat_calib_ns, (uint64_t)best);
	c->at = gx_mono_ns();
	return 0;
}

/* c's state for ctx (the current context), set up now if new; NULL if none. gx_hl_ev_mu held. */
static struct gx_hl_ctx *gx_hl_ctx_of(CUcontext ctx)
{
	struct gx_hl_ctx *c = NULL;
	int mode;

	for (int i = 0; i < GX_HL_CTXS; i++) {
		if (gx_hl.ctx[i].ctx == ctx)
			return gx_hl.ctx[i].failed ? NULL : &gx_hl.ctx[i];
		if (!gx_hl.ctx[i].ctx && !c)
			c = &gx_hl.ctx[i];
	}
	if (!c)
		return NULL;
	memset(c, 0, sizeof(*c));
	c->ctx = ctx;
	mode = gx_capture_relax(); /* our stream's waits never meet another thread's capture (nested: restored below) */
	if (gx_drv.cuStreamCreate(&c->stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS || gx_hl_epoch(c, 0) != 0) {
		c->failed = 1; /* its launches count as skipped (latencySkipped) */
		gx_log("device probes: no host-side launch latency in context %p: events or our stream failed", (void *)ctx);
	}
	gx_capture_restore(mode);
	return c->failed ? NULL : c;
}

/* Reads slot s if its event completed: 1 when it was freed. gx_hl_ev_mu held. */
static int gx_hl_reap(struct gx_hl_ctx *c, struct gx_hl_slot *s)
{
	float ms = 0;
	CUresult r;

	if (!s->k)
		return 1;
	r = gx_hld.cuEventQuery(s->ev);
	if (r == CUDA_ERROR_NOT_READY)
		return 0;
	if (r == CUDA_SUCCESS && gx_hld.cuEventElapsedTime(&ms, c->epoch[s->epoch], s->ev) == CUDA_SUCCESS)
		gx_hl_hist_add(s->k, c->epoch_ns[s->epoch] + (int64_t)((double)ms * 1e6) - s->t_launch);
	else
		atomic_fetch_add(&gx_hl.lat_skipped, 1);
	s->k = NULL;
	return 1;
}

/* Every slot of c; a new epoch when the old one is old and no slot reads the other. gx_hl_ev_mu held, c->ctx current. */
static void gx_hl_reap_all(struct gx_hl_ctx *c, int renew)
{
	int other = 0;

	for (int i = 0; i < GX_HL_EVENTS; i++)
		if (!gx_hl_reap(c, &c->slot[i]) && c->slot[i].epoch != c->cur)
			other = 1;
	if (renew && !other && gx_mono_ns() - c->at > GX_HL_EPOCH_NS && gx_hl_epoch(c, !c->cur) == 0)
		c->cur = !c->cur;
}

static void gx_hl_latency(struct gx_hl_kernel *k, CUstream stream, int64_t t_launch)
{
	CUcontext ctx = NULL;
	struct gx_hl_ctx *c;
	struct gx_hl_slot *s = NULL;

	int mode;

	if (pthread_mutex_trylock(&gx_hl_ev_mu) != 0) {
		atomic_fetch_add(&gx_hl.lat_skipped, 1); /* never wait */
		return;
	}
	mode = gx_capture_relax(); /* a query is "unsafe" while another thread captures */
	if (gx_drv.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx || !(c = gx_hl_ctx_of(ctx))) {
		atomic_fetch_add(&gx_hl.lat_skipped, 1);
		gx_capture_restore(mode);
		pthread_mutex_unlock(&gx_hl_ev_mu);
		return;
	}
	for (int i = 0; i < GX_HL_REAP; i++) {
		struct gx_hl_slot *t = &c->slot[(c->next + i) % GX_HL_EVENTS];

		if (gx_hl_reap(c, t) && !s)
			s = t;
	}
	c->next = (c->next + GX_HL_REAP) % GX_HL_EVENTS;
	if (s && !s->ev && gx_hld.cuEventCreate(&s->ev, 0) != CUDA_SUCCESS)
		s->ev = NULL;
	if (s && s->ev && gx_hld.cuEventRecord(s->ev, stream) == CUDA_SUCCESS) {
		s->k = k;
		s->t_launch = t_launch;
		s->epoch = c->cur;
	} else {
		atomic_fetch_add(&gx_hl.lat_skipped, 1);
	}
	gx_capture_restore(mode);
	pthread_mutex_unlock(&gx_hl_ev_mu);
}

/* A context that ends (before cuCtxDestroy, a primary context's release or reset): its events go. */
void gx_hl_ctx_ending(CUcontext ctx)
{
	if (!gx_hl.on || !ctx)
		return;
	pthread_mutex_lock(&gx_hl_ev_mu);
	for (int i = 0; i < GX_HL_CTXS; i++) {
		struct gx_hl_ctx *c = &gx_hl.ctx[i];
		CUcontext cur = NULL;
		int mode;

		if (c->ctx != ctx)
			continue;
		mode = gx_capture_relax();
		gx_drv.cuCtxGetCurrent(&cur);
		if (!c->failed && gx_drv.cuCtxSetCurrent(ctx) == CUDA_SUCCESS) {
			gx_hl_reap_all(c, 0);
			for (int j = 0; j < GX_HL_EVENTS; j++) {
				if (c->slot[j].k)
					atomic_fetch_add(&gx_hl.lat_skipped, 1);
				if (c->slot[j].ev)
					gx_hld.cuEventDestroy_v2(c->slot[j].ev);
			}
			for (int e = 0; e < 2; e++)
				if (c->epoch[e])
					gx_hld.cuEventDestroy_v2(c->epoch[e]);
			if (c->stream && gx_drv.cuStreamDestroy_v2)
				gx_drv.cuStreamDestroy_v2(c->stream);
			gx_drv.cuCtxSetCurrent(cur);
		}
		gx_capture_restore(mode);
		memset(c, 0, sizeof(*c));
	}
	pthread_mutex_unlock(&gx_hl_ev_mu);
}

/* Before a device's primary context is released or reset: that context's events go (it may end). */
void gx_hl_device_ending(CUdevice dev)
{
	CUcontext p = NULL;
	unsigned int flags = 0;
	int active = 0;

	if (!gx_hl.on || !gx_drv.cuDevicePrimaryCtxGetState || !gx_drv.cuDevicePrimaryCtxRetain ||
	    !gx_drv.cuDevicePrimaryCtxRelease_v2)
		return;
	if (gx_drv.cuDevicePrimaryCtxGetState(dev, &flags, &active) != CUDA_SUCCESS || !active ||
	    gx_drv.cuDevicePrimaryCtxRetain(&p, dev) != CUDA_SUCCESS)
		return;
	gx_drv.cuDevicePrimaryCtxRelease_v2(dev);
	gx_hl_ctx_ending(p);
}

/* ---- the launch path ---- */

static int gx_hl_capturing(CUstream stream)
{
	int capturing = 0;

	/* an error (the legacy stream while a blocking stream captures) is no launch of ours to count either */
	return gx_drv.cuStreamIsCapturing &&
	       (gx_drv.cuStreamIsCapturing(stream, &capturing) != CUDA_SUCCESS || capturing);
}

/* the copy thread, asked for by the first launch of a process that patched nothing */
static void gx_hl_want_thread(void)
{
	if (gx_hl.thread_asked || pthread_mutex_trylock(&gx_probe_mu) != 0)
		return;
	if (!gx_pr.stopping)
		gx_start_copy_out();
	gx_hl.thread_asked = 1;
	pthread_mutex_unlock(&gx_probe_mu);
}

/* the launch's host time: only host-measured latency uses it, so no clock read otherwise */
int64_t gx_hl_now(void)
{
	return gx_hl.on && gx_hl.latency ? gx_realtime_ns() : 0;
}

void gx_hl_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		  CUstream stream, int ptsz, int64_t t_launch, CUresult r)
{
	const unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
	uint64_t blocks = (uint64_t)gx * gy * gz;
	struct gx_hl_kernel *k;

	if (!gx_hl.on || r != CUDA_SUCCESS || !f)
		return;
	if (ptsz && !stream)
		stream = GX_CU_STREAM_PER_THREAD;
	if (gx_hl_capturing(stream))
		return; /* a node of a graph being captured: its replays count */
	if (!gx_hl.thread_asked)
		gx_hl_want_thread();
	if (!(k = gx_hl_kernel_of((uintptr_t)f))) {
		atomic_fetch_add_explicit(&gx_hl.full_launches, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&gx_hl.full_blocks, blocks, memory_order_relaxed);
		return;
	}
	gx_hl_count(k, 1, blocks, g, b, 0);
	if (!atomic_load_explicit(&k->measured, memory_order_acquire) && pthread_mutex_trylock(&gx_probe_mu) == 0) {
		gx_hl_classify(k); /* else at the next launch, or by the copy thread */
		pthread_mutex_unlock(&gx_probe_mu);
	}
	if (gx_hl.latency) {
		/*
		 * Only a probed kernel (listed, or every kernel when nothing is)
		 * gets an event: a set that probes one kernel with launch times
		 * must not cost an event on every other kernel's launch.
		 */
		uint32_t m = atomic_load_explicit(&k->measured, memory_order_acquire);

		if (m == GPUEXT_DEVRT_MEASURED_HOST && k->listed)
			gx_hl_latency(k, stream, t_launch);
		else if (!m)
			atomic_fetch_add(&gx_hl.lat_skipped, 1);
	}
}

/* ---- graphs ---- */

struct gx_hl_walk {
	struct gx_hl_gnode *nodes;
	int n, cap;
	uint64_t read, unread;
};

/* CUDA_KERNEL_NODE_PARAMS_v2: func, grid[3], block[3], sharedMem, kernelParams, extra, kern, ctx */
struct gx_kernel_node_params {
	CUfunction func;
	unsigned int grid[3], block[3], shm;
	void **params, **extra;
	CUkernel kern;
	CUcontext ctx;
	unsigned char spare[64]; /* a newer driver's larger struct */
};

static void gx_hl_walk_graph(struct gx_hl_walk *w, CUgraph g, int depth)
{
	size_t n = 0;
	CUgraphNode *nodes;

	if (depth > GX_HL_GRAPH_DEPTH || gx_hld.cuGraphGetNodes(g, NULL, &n) != CUDA_SUCCESS)
		return;
	if (n > GX_HL_GRAPH_NODES - w->read)
		n = GX_HL_GRAPH_NODES - w->read;
	if (!n || !(nodes = calloc(n, sizeof(*nodes))))
		return;
	if (gx_hld.cuGraphGetNodes(g, nodes, &n) != CUDA_SUCCESS)
		n = 0;
	for (size_t i = 0; i < n && w->read < GX_HL_GRAPH_NODES; i++) {
		int type = -1;
		CUgraph child = NULL;

		w->read++;
		if (gx_hld.cuGraphNodeGetType(nodes[i], &type) != CUDA_SUCCESS)
			continue;
		if (type == GX_GRAPH_NODE_GRAPH && gx_hld.cuGraphChildGraphNodeGetGraph &&
		    gx_hld.cuGraphChildGraphNodeGetGraph(nodes[i], &child) == CUDA_SUCCESS) {
			gx_hl_walk_graph(w, child, depth + 1);
		} else if (type == GX_GRAPH_NODE_KERNEL) {
			struct gx_kernel_node_params p;
			uintptr_t h;
			struct gx_hl_kernel *k = NULL;
			int j;

			memset(&p, 0, sizeof(p));
			if (!gx_hld.cuGraphKernelNodeGetParams_v2 || gx_hld.cuGraphKernelNodeGetParams_v2(nodes[i], &p) != CUDA_SUCCESS ||
			    !(h = p.kern ? (uintptr_t)p.kern : (uintptr_t)p.func) || !(k = gx_hl_kernel_of(h))) {
				w->unread++;
				continue;
			}
			for (j = 0; j < w->n && w->nodes[j].k != k; j++)
				;
			if (j == w->n) {
				if (w->n == w->cap) {
					int cap = w->cap ? w->cap * 2 : 16;
					struct gx_hl_gnode *nn = realloc(w->nodes, (size_t)cap * sizeof(*nn));

					if (!nn) {
						w->unread++;
						continue;
					}
					w->nodes = nn, w->cap = cap;
				}
				w->nodes[w->n++] = (struct gx_hl_gnode){k, 0, 0};
			}
			w->nodes[j].count++;
			w->nodes[j].blocks += (uint64_t)p.grid[0] * p.grid[1] * p.grid[2];
			for (int d = 0; d < 3; d++) {
				atomic_store_explicit(&k->grid[d], p.grid[d], memory_order_relaxed);
				atomic_store_explicit(&k->block[d], p.block[d], memory_order_relaxed);
			}
			gx_hl_max(&k->max_blocks, (uint64_t)p.grid[0] * p.grid[1] * p.grid[2]);
		}
	}
	free(nodes);
}

/* After a successful cuGraphInstantiate*: the graph's kernel nodes, for its replays. */
void gx_hl_graph_instantiated(CUgraphExec exec, void *graph)
{
	struct gx_hl_walk w = {0};
	struct gx_hl_graph *slot = NULL;

	if (!gx_hl.on || !exec || !graph || !gx_hld.cuGraphGetNodes || !gx_hld.cuGraphNodeGetType)
		return;
	gx_hl_walk_graph(&w, (CUgraph)graph, 0);
	pthread_mutex_lock(&gx_probe_mu);
	for (int i = 0; i < w.n; i++)
		gx_hl_classify(w.nodes[i].k);
	pthread_mutex_unlock(&gx_probe_mu);
	pthread_rwlock_wrlock(&gx_hl_graph_mu);
	for (int i = 0; i < GX_HL_GRAPHS && !slot; i++)
		if (gx_hl.graph[i].exec == exec)
			slot = &gx_hl.graph[i]; /* a handle used again */
	for (int i = 0; i < GX_HL_GRAPHS && !slot; i++)
		if (!gx_hl.graph[i].exec)
			slot = &gx_hl.graph[i];
	if (!slot) { /* the oldest goes: its replays from now on are counted as not seen */
		slot = &gx_hl.graph[gx_hl.graph_next];
		gx_hl.graph_next = (gx_hl.graph_next + 1) % GX_HL_GRAPHS;
	}
	free(slot->nodes);
	slot->exec = exec;
	slot->n = w.n;
	slot->nodes = w.nodes;
	slot->unread = w.unread;
	pthread_rwlock_unlock(&gx_hl_graph_mu);
	GX_DEBUG("probes: graph %p: %d kernels, %llu nodes read, %llu unreadable", (void *)exec, w.n,
		 (unsigned long long)w.read, (unsigned long long)w.unread);
}

void gx_hl_graph_launch(CUgraphExec exec, CUstream stream, int ptsz, CUresult r)
{
	struct gx_hl_graph *g = NULL;

	if (!gx_hl.on || r != CUDA_SUCCESS)
		return;
	if (ptsz && !stream)
		stream = GX_CU_STREAM_PER_THREAD;
	if (gx_hl_capturing(stream))
		return;
	if (!gx_hl.thread_asked)
		gx_hl_want_thread();
	atomic_fetch_add_explicit(&gx_hl.graph_launches, 1, memory_order_relaxed);
	pthread_rwlock_rdlock(&gx_hl_graph_mu);
	for (int i = 0; i < GX_HL_GRAPHS && !g; i++)
		if (gx_hl.graph[i].exec == exec)
			g = &gx_hl.graph[i];
	if (!g) {
		atomic_fetch_add_explicit(&gx_hl.graph_unseen, 1, memory_order_relaxed);
	} else {
		for (int i = 0; i < g->n; i++) {
			struct gx_hl_kernel *k = g->nodes[i].k;

			atomic_fetch_add_explicit(&k->launches, g->nodes[i].count, memory_order_relaxed);
			atomic_fetch_add_explicit(&k->graph_launches, g->nodes[i].count, memory_order_relaxed);
			atomic_fetch_add_explicit(&k->blocks, g->nodes[i].blocks, memory_order_relaxed);
		}
		atomic_fetch_add_explicit(&gx_hl.graph_unread, g->unread, memory_order_relaxed);
	}
	pthread_rwlock_unlock(&gx_hl_graph_mu);
}

/* ---- the file ---- */

static void gx_hl_cover(struct gpuext_devrt_launches_coverage *cov, uint32_t *ncov, uint32_t measured,
			const char *reason, uint64_t launches, uint64_t blocks, uint32_t kernels)
{
	uint32_t i;

	if (!launches && !kernels)
		return;
	for (i = 0; i < *ncov; i++)
		if (cov[i].measured == measured && !strncmp(cov[i].reason, reason, sizeof(cov[i].reason)))
			break;
	if (i == *ncov) {
		if (*ncov == GPUEXT_DEVRT_LAUNCHES_MAX_COVERAGE) {
			reason = "(other-reasons)"; /* the last entry takes every reason past the bound */
			i = *ncov - 1;
			gx_copy_text(cov[i].reason, sizeof(cov[i].reason), reason);
		} else {
			memset(&cov[i], 0, sizeof(cov[i]));
			cov[i].measured = measured;
			gx_copy_text(cov[i].reason, sizeof(cov[i].reason), reason);
			(*ncov)++;
		}
	}
	cov[i].launches += launches;
	cov[i].blocks += blocks;
	cov[i].kernels += kernels;
}

static int gx_hl_by_launches(const void *a, const void *b)
{
	uint64_t x = atomic_load(&(*(struct gx_hl_kernel *const *)a)->launches);
	uint64_t y = atomic_load(&(*(struct gx_hl_kernel *const *)b)->launches);

	return x < y ? 1 : x > y ? -1 : 0;
}

static void gx_hl_row(struct gpuext_devrt_launches_row *r, struct gx_hl_kernel *k)
{
	memset(r, 0, sizeof(*r));
	r->kernel_id = k->kernel_id;
	memcpy(r->name, k->name, sizeof(r->name));
	r->name_len = k->name_len;
	r->measured = atomic_load(&k->measured);
	memcpy(r->reason, k->reason, sizeof(r->reason));
	r->image = k->image;
	r->kernels = 1;
	r->launches = atomic_load(&k->launches);
	r->graph_launches = atomic_load(&k->graph_launches);
	r->blocks = atomic_load(&k->blocks);
	for (int i = 0; i < 3; i++)
		r->grid_last[i] = atomic_load(&k->grid[i]), r->block_last[i] = atomic_load(&k->block[i]);
	r->max_blocks = atomic_load(&k->max_blocks);
	r->max_threads = atomic_load(&k->max_threads);
	r->lat_count = atomic_load(&k->lat_count);
	r->lat_sum_ns = atomic_load(&k->lat_sum);
	r->lat_min_ns = atomic_load(&k->lat_min);
	r->lat_max_ns = atomic_load(&k->lat_max);
}

/* the rest of a class, added into its "other" row */
static void gx_hl_other(struct gpuext_devrt_launches_row *o, const struct gpuext_devrt_launches_row *r)
{
	if (!o->kernels) {
		memset(o, 0, sizeof(*o));
		gx_copy_text(o->name, sizeof(o->name), GPUEXT_DEVRT_LAUNCHES_OTHER);
		o->name_len = (uint32_t)strlen(GPUEXT_DEVRT_LAUNCHES_OTHER);
		o->measured = r->measured;
		gx_copy_text(o->reason, sizeof(o->reason), "(many)");
		o->image = 0xffffffffu;
	}
	o->kernels++;
	o->launches += r->launches;
	o->graph_launches += r->graph_launches;
	o->blocks += r->blocks;
	if (r->max_blocks > o->max_blocks)
		o->max_blocks = r->max_blocks;
	if (r->max_threads > o->max_threads)
		o->max_threads = r->max_threads;
	o->lat_count += r->lat_count;
	o->lat_sum_ns += r->lat_sum_ns;
	if (r->lat_min_ns && (!o->lat_min_ns || r->lat_min_ns < o->lat_min_ns))
		o->lat_min_ns = r->lat_min_ns;
	if (r->lat_max_ns > o->lat_max_ns)
		o->lat_max_ns = r->lat_max_ns;
}

/* Completed events of every context read (and the epochs renewed). gx_probe_mu held. */
static void gx_hl_reap_contexts(void)
{
	CUcontext cur = NULL;
	int mode, moved = 0;

	if (!gx_hl.latency)
		return;
	pthread_mutex_lock(&gx_hl_ev_mu);
	mode = gx_capture_relax();
	gx_drv.cuCtxGetCurrent(&cur);
	for (int i = 0; i < GX_HL_CTXS; i++) {
		struct gx_hl_ctx *c = &gx_hl.ctx[i];

		if (!c->ctx || c->failed || gx_drv.cuCtxSetCurrent(c->ctx) != CUDA_SUCCESS)
			continue;
		moved = 1;
		gx_hl_reap_all(c, 1);
	}
	if (moved)
		gx_drv.cuCtxSetCurrent(cur);
	gx_capture_restore(mode);
	pthread_mutex_unlock(&gx_hl_ev_mu);
}

/*
 * Writes <key>.launches (temp + rename): the coverage, the top kernels and
 * an "other" row per class. From the copy thread and the exit handler;
 * gx_probe_mu held.
 */
void gx_hl_write(int final)
{
	static struct gx_hl_kernel *ks[GX_HL_SLOTS];
	static struct gpuext_devrt_launches_row rows[GPUEXT_DEVRT_LAUNCHES_MAX_ROWS];
	struct gpuext_devrt_launches_coverage cov[GPUEXT_DEVRT_LAUNCHES_MAX_COVERAGE];
	struct gpuext_devrt_launches_row other[4];
	struct gpuext_devrt_launches_header hdr;
	char path[PATH_MAX + 64], tmp[PATH_MAX + 64];
	uint32_t ncov = 0, nrows = 0;
	int n = 0, fd, ok;
	uint64_t gl = atomic_load(&gx_hl.graph_launches);

	if (!gx_hl.on || !gx_pr.dir[0] || (!atomic_load(&gx_hl.nkernels) && !gl && !atomic_load(&gx_hl.full_launches)))
		return;
	gx_hl_reap_contexts();
	for (int i = 0; i < GX_HL_SLOTS; i++) {
		struct gx_hl_kernel *k = &gx_hl.k[i];

		if (!atomic_load(&k->fn))
			continue;
		gx_hl_classify(k);
		ks[n++] = k;
	}
	qsort(ks, (size_t)n, sizeof(ks[0]), gx_hl_by_launches);
	memset(other, 0, sizeof(other));
	for (int i = 0; i < n; i++) {
		struct gpuext_devrt_launches_row r;

		gx_hl_row(&r, ks[i]);
		gx_hl_cover(cov, &ncov, r.measured, r.reason, r.launches, r.blocks, 1);
		if (nrows < GPUEXT_DEVRT_LAUNCHES_TOP)
			rows[nrows++] = r;
		else
			gx_hl_other(&other[r.measured & 3], &r);
	}
	for (int m = 1; m < 4; m++)
		if (other[m].kernels)
			rows[nrows++] = other[m];
	gx_hl_cover(cov, &ncov, GPUEXT_DEVRT_MEASURED_HOST, GX_HL_TABLE_FULL, atomic_load(&gx_hl.full_launches),
		    atomic_load(&gx_hl.full_blocks), 0);
	gx_hl_cover(cov, &ncov, GPUEXT_DEVRT_MEASURED_NONE, GX_HL_GRAPH_NOT_SEEN, atomic_load(&gx_hl.graph_unseen), 0, 0);
	gx_hl_cover(cov, &ncov, GPUEXT_DEVRT_MEASURED_NONE, GX_HL_GRAPH_NODES_UNREAD, atomic_load(&gx_hl.graph_unread), 0, 0);

	memset(&hdr, 0, sizeof(hdr));
	memcpy(hdr.magic, GPUEXT_DEVRT_LAUNCHES_MAGIC, sizeof(hdr.magic));
	hdr.version = GPUEXT_DEVRT_LAUNCHES_VERSION;
	hdr.pid = (uint32_t)gx_key();
	hdr.seq = ++gx_hl.seq;
	hdr.time_ns = (uint64_t)gx_realtime_ns();
	hdr.tenant_id = (uint32_t)gx_cfg.tenant_id;
	hdr.final = final ? 1u : 0u;
	hdr.nrows = nrows;
	hdr.ncoverage = ncov;
	hdr.flags = gx_hl.latency ? GPUEXT_DEVRT_LAUNCHES_FLAG_LATENCY : 0;
	hdr.kernels = (uint32_t)n;
	hdr.graph_launches = gl;
	hdr.lat_skipped = atomic_load(&gx_hl.lat_skipped);
	hdr.lat_calib_ns = atomic_load(&gx_hl.lat_calib_ns);
	for (int i = 0; i < (int)GPUEXT_DEVRT_LAUNCHES_HIST; i++)
		hdr.lat_hist[i] = atomic_load(&gx_hl.hist[i]);

	snprintf(path, sizeof(path), "%s/%d" GPUEXT_DEVRT_PROBES_LAUNCHES_SUFFIX, gx_pr.dir, gx_key());
	snprintf(tmp, sizeof(tmp), "%s/.%d.launches.tmp", gx_pr.dir, gx_key());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return;
	ok = write(fd, &hdr, sizeof(hdr)) == (ssize_t)sizeof(hdr) &&
	     write(fd, cov, ncov * sizeof(cov[0])) == (ssize_t)(ncov * sizeof(cov[0])) &&
	     write(fd, rows, nrows * sizeof(rows[0])) == (ssize_t)(nrows * sizeof(rows[0]));
	close(fd);
	if (!ok || rename(tmp, path) != 0) {
		unlink(tmp);
		GX_DEBUG("probes: writing %s failed", path);
	}
}

/* The child of a fork: none of the parent's launches, contexts or events. */
void gx_hl_after_fork(void)
{
	int on = gx_hl.on, latency = gx_hl.latency;

	pthread_mutex_init(&gx_hl_ev_mu, NULL);
	pthread_rwlock_init(&gx_hl_graph_mu, NULL);
	for (int i = 0; i < GX_HL_GRAPHS; i++)
		free(gx_hl.graph[i].nodes);
	memset(&gx_hl, 0, sizeof(gx_hl));
	gx_hl.on = on, gx_hl.latency = latency;
}
