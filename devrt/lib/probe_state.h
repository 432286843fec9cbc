/*
 * probe_state.h - what the device-probe files of the interposer share
 * (docs/device-probes.md, "Device probes in the interposer"): the driver
 * calls the probes make (not hooked), one patched image (struct gx_pimage),
 * the process's probe state gx_pr under gx_probe_mu, and the calls between
 * the files. The interface to the rest of the library is devrt.h.
 *
 *   probe_load.c     the bundle (module.conf, module.ptx), the status file, each image's patched load
 *   probe_bind.c     binding a patched image in a context: map symbols, tenant id, launch-time symbol
 *   probe_clock.c    the device clock against the host's (launch times in the device's clock)
 *   probe_copyout.c  copying the maps out to <pid>-<image>.maps: the thread, the exit handler
 *   probe_ctx.c      contexts and images that end: last copies, unbinding
 *   probe_launch.c   the launch path: late binds, a library's other contexts, launch times
 *   probe_hostlaunch.c  every launch counted host-side, per kernel, with how it is observed (<pid>.launches)
 *   probe_files.c    the process's key (its files' names), claimed under a lock it holds for life; the
 *                    files of processes that are gone removed
 *
 * All locks are process-private, but for the liveness lock of probe_files.c.
 */
#ifndef GPUEXT_PROBE_STATE_H
#define GPUEXT_PROBE_STATE_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "devrt.h"
#include "gpuext_devrt_maps.h"
#include "ptxpatch.h"

/* driver functions the probes call (not hooked): one list, typed pointers */
#define GX_DRIVER_CALLS(X)                                                                         \
	X(cuCtxGetCurrent, (CUcontext * pctx))                                                     \
	X(cuCtxSetCurrent, (CUcontext ctx))                                                        \
	X(cuCtxSynchronize, (void))                                                                \
	X(cuCtxGetDevice, (CUdevice * dev))                                                        \
	X(cuDeviceGet, (CUdevice * dev, int ordinal))                                              \
	X(cuDeviceGetAttribute, (int *value, int attrib, CUdevice dev))                            \
	X(cuStreamCreate, (CUstream * stream, unsigned int flags))                                 \
	X(cuStreamSynchronize, (CUstream stream))                                                  \
	X(cuStreamDestroy_v2, (CUstream stream))                                                   \
	X(cuDevicePrimaryCtxGetState, (CUdevice dev, unsigned int *flags, int *active))            \
	X(cuDevicePrimaryCtxRetain, (CUcontext * pctx, CUdevice dev))                              \
	X(cuDevicePrimaryCtxRelease_v2, (CUdevice dev))                                            \
	X(cuMemcpyDtoHAsync_v2, (void *dst, CUdeviceptr src, size_t bytes, CUstream stream))       \
	X(cuMemcpyHtoDAsync_v2, (CUdeviceptr dst, const void *src, size_t bytes, CUstream stream)) \
	X(cuLibraryGetGlobal, (CUdeviceptr * dptr, size_t *bytes, CUlibrary lib, const char *name)) \
	X(cuModuleGetGlobal_v2, (CUdeviceptr * dptr, size_t *bytes, CUmodule mod, const char *name)) \
	X(cuLibraryGetModule, (CUmodule * mod, CUlibrary lib))                                      \
	X(cuKernelGetLibrary, (CUlibrary * lib, CUkernel kernel))                                   \
	X(cuFuncGetModule, (CUmodule * mod, CUfunction f))                                          \
	X(cuStreamWriteValue64_v2, (CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags)) \
	X(cuModuleLoadData, (CUmodule * mod, const void *image))                                   \
	X(cuModuleUnload, (CUmodule mod))                                                          \
	X(cuModuleGetFunction, (CUfunction * f, CUmodule mod, const char *name))                   \
	X(cuLaunchKernel, (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, \
			   unsigned int by, unsigned int bz, unsigned int shm, CUstream stream, void **params,   \
			   void **extra))                                                                  \
	X(cuMemHostAlloc, (void **p, size_t bytes, unsigned int flags))                            \
	X(cuMemHostGetDevicePointer_v2, (CUdeviceptr * dptr, void *p, unsigned int flags))          \
	X(cuMemFreeHost, (void *p))                                                               \
	X(cuThreadExchangeStreamCaptureMode, (int *mode))                                          \
	X(cuStreamIsCapturing, (CUstream stream, int *status))

#define GX_DRV_TYPE(name, params) typedef CUresult (*gx_drv_##name) params;
GX_DRIVER_CALLS(GX_DRV_TYPE)
#undef GX_DRV_TYPE

struct gx_drv_calls {
#define GX_DRV_FIELD(name, params) gx_drv_##name name;
	GX_DRIVER_CALLS(GX_DRV_FIELD)
#undef GX_DRV_FIELD
};
extern struct gx_drv_calls gx_drv;

/* <key>.status line keys ("key=") and values, from gpuext_devrt_probes.h (what devrt/probefiles/maps parses) */
#define GX_ST_IMAGE GPUEXT_DEVRT_STATUS_KEY_IMAGE "="
#define GX_ST_STATE GPUEXT_DEVRT_STATUS_KEY_STATE "="
#define GX_ST_REASON GPUEXT_DEVRT_STATUS_KEY_REASON "="
#define GX_ST_LAUNCH_TIME GPUEXT_DEVRT_STATUS_KEY_LAUNCH_TIME "="
#define GX_ST_FINAL GPUEXT_DEVRT_STATUS_KEY_FINAL "="
#define GX_ST_IMAGE_NONE GPUEXT_DEVRT_STATUS_IMAGE_NONE
#define GX_ST_PATCHED GPUEXT_DEVRT_STATUS_PATCHED
#define GX_ST_UNPATCHED GPUEXT_DEVRT_STATUS_UNPATCHED
#define GX_ST_BOUND GPUEXT_DEVRT_STATUS_BOUND
#define GX_ST_UNBOUND GPUEXT_DEVRT_STATUS_UNBOUND
#define GX_ST_OFF GPUEXT_DEVRT_STATUS_OFF
#define GX_ST_MISSED GPUEXT_DEVRT_STATUS_MISSED

#define GX_SYM_TENANT GPUEXT_DEVRT_SYM_TENANT_ID
#define GX_SYM_LAUNCH_NS GPUEXT_DEVRT_SYM_LAUNCH_NS
#define GX_LAUNCH_CACHE 4096 /* direct-mapped by function handle: frameworks launch thousands of kernels */
#define GX_PROBE_MAX_IMAGES 1024

struct gx_pimage {
	int index;
	int is_library;
	void *handle;      /* CUlibrary or CUmodule */
	int bound;         /* symbols looked up in ctx */
	int gone;          /* its context ended (gx_ctx_ending): never bound again */
	int ending;        /* its primary context is being released or reset: no copy until we know */
	int lib_counted;   /* counted in gx_pr.libraries (a library's first binding) */
	char *ptx;         /* the patched text: kept for the process's life (the driver may load lazily from it) */
	CUcontext ctx;
	CUmodule ctx_module; /* a library's module in ctx (launch time: CUfunction -> image) */
	CUdeviceptr launch_ns; /* __gpuext_launch_ns in ctx, 0 if none */
	CUdeviceptr hostw_ptr[GX_CONF_MAX_HOST_WRITES]; /* conf.hostw's u64 in ctx, 0 if none (gx_host_writes) */
	_Atomic int64_t clock_offset; /* %globaltimer - CLOCK_REALTIME in ctx (gx_clock_sync), added to launch times */
	int clock_synced;             /* 1: clock_offset measured; -1: tried and failed (the copy thread retries); 0: not yet */
	struct timespec clock_at;     /* when, CLOCK_MONOTONIC */
	CUstream stream;   /* non-blocking, ours */
	CUdeviceptr map_ptr[GX_CONF_MAX_MAPS];
	size_t map_bytes[GX_CONF_MAX_MAPS];
	unsigned char *host; /* staging for one copy of all maps */
	size_t host_size;
	uint64_t seq;
	/*
	 * A library is loaded once for every context: its kernels run, with
	 * their own maps, in each context they are launched in. The image's
	 * first binding is the entry gx_probe_load made (ctxn 0); each further
	 * context gets an entry of its own (ctxn 1, 2, ...), chained from the
	 * first, with its own maps file <pid>-<image>-<ctxn>.maps.
	 */
	int ctxn;
	struct gx_pimage *_Atomic next_ctx;
};

#define GX_PROBE_MAX_CTX 16 /* contexts a library image is bound in */
#define GX_CTX_ENDED ((CUcontext)(uintptr_t)1) /* first_ctx once the first context ended: matches none */

struct gx_probe_state {
	int on;
	struct gx_probe_conf conf;
	char *frag;
	size_t frag_len;
	char dir[PATH_MAX];  /* $GPUEXT_TENANT_ACCT/probes, "" if unusable */
	_Atomic int next_index;
	_Atomic int key;      /* names this process's files: its pid, or pid + n << 22 if taken (0: not yet) */
	_Atomic int pending;  /* patched images not yet bound to a context */
	_Atomic int launch_time; /* 1 while launch times are written */
	_Atomic int launch_time_failed; /* a write failed: launch times stay off for the process */
	_Atomic int libraries;   /* bound library images: a launch checks its context */
	_Atomic(CUcontext) first_ctx; /* the context the first image was bound in */
	_Atomic uint64_t launch_cache[GX_LAUNCH_CACHE]; /* f << 16 | (image slot + 1), 0xffff: none */
	int exit_registered, thread_started, stopping;
	/* the clock kernel's module, kept in the first context measured (others load and unload their own) */
	CUmodule clock_mod;
	CUcontext clock_mod_ctx;
	struct gx_pimage *images[GX_PROBE_MAX_IMAGES];
	int nimages;
};
extern struct gx_probe_state gx_pr;
extern pthread_mutex_t gx_probe_mu; /* process-private: images, files, thread */

/* probe_files.c */
int gx_key(void);
/* probe_load.c */
void gx_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* probe_bind.c */
int gx_capture_relax(void);
void gx_capture_restore(int mode);
int gx_bind(struct gx_pimage *im);
/* probe_clock.c */
int64_t gx_realtime_ns(void);
int gx_clock_sync(struct gx_pimage *im, const char *why);
struct gx_pimage *gx_clock_owner(CUcontext ctx, int n);
void gx_clock_copy(struct gx_pimage *im, const struct gx_pimage *owner);
void gx_clock_resync(int final);
/* probe_copyout.c */
int gx_copy_out(struct gx_pimage *im, int final);
void gx_write_maps(struct gx_pimage *im, int final);
void gx_start_copy_out(void);
/* probe_launch.c */
void gx_forget_launches(void);
/* probe_hostlaunch.c */
void gx_hl_init(void);
void gx_hl_unpatched(void *handle, int index, const char *reason);
void gx_hl_write(int final);
void gx_hl_after_fork(void);

#endif /* GPUEXT_PROBE_STATE_H */
