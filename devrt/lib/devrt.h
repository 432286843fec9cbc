/*
 * devrt.h - internal interfaces of the device runtime library
 * (libgpuext-devrt.so): the hook table generated from hooks.def, the
 * resolution of real driver entry points (resolve.c), the tenant settings
 * (settings.c), logging and init (devrt.c), the cross-process accounting
 * (acct.c), the launch gate (priority.c) and the device probes (probe_*.c,
 * whose shared state is probe_state.h).
 */
#ifndef GPUEXT_DEVRT_H
#define GPUEXT_DEVRT_H

#include <stdint.h>
#include <stdatomic.h>
#include <stddef.h>

#include "cuda_min.h"
#include "gpuext_devrt_env.h" /* GPUEXT_ENV_*: the names getenv reads */
#include "gpuext_devrt_shm.h" /* GPUEXT_DEVRT_MAX_DEVICES */

enum gx_lib { GX_LIB_CUDA, GX_LIB_NVML, GX_NLIBS };
enum gx_stream { GX_STREAM_ANY, GX_STREAM_LEGACY, GX_STREAM_PTSZ };

/* enum of hooked entry points: GX_H_cuMemAlloc_v2, ... */
enum gx_hook {
#define HOOK(sym, lib, base, vmin, vmax, stream, ret, params, args) GX_H_##sym,
#include "hooks.def"
	GX_NHOOKS
};

/* typed pointers: gx_pfn_cuMemAlloc_v2, ... */
#define HOOK(sym, lib, base, vmin, vmax, stream, ret, params, args) typedef ret(*gx_pfn_##sym) params;
#include "hooks.def"

/* our exported wrappers, with the exact CUDA/NVML names and prototypes */
#define HOOK(sym, lib, base, vmin, vmax, stream, ret, params, args) \
	__attribute__((visibility("default"))) ret sym params;
#include "hooks.def"

struct gx_hook_info {
	const char *sym;  /* exact variant symbol */
	enum gx_lib lib;
	const char *base; /* cuGetProcAddress name, or NULL */
	int vmin, vmax;
	enum gx_stream stream;
	void *wrapper;    /* our function for this variant */
};
extern const struct gx_hook_info gx_hooks[GX_NHOOKS];

/* resolve.c: the real entry point of one variant (resolved lazily, cached); NULL if absent. */
void *gx_real(enum gx_hook id);
typedef void *(*gx_dlsym_fn)(void *, const char *);
/* The real dlsym, never ours (see resolve.c for the versions it asks for); NULL if not found. */
gx_dlsym_fn gx_dlsym_real(void);
/* The library's handle: already loaded if possible, otherwise (load) loaded now, by soname. */
void *gx_lib(enum gx_lib lib, int load);
/* The variant's function in handle (the real dlsym), NULL if absent or our own wrapper. */
void *gx_lookup_in(void *handle, enum gx_hook id);
/* Records the driver's pointer for a variant (first one wins); returns our wrapper. */
void *gx_adopt(enum gx_hook id, void *real);

/* typed getters: gx_orig_cuMemAlloc_v2() */
#define HOOK(sym, lib, base, vmin, vmax, stream, ret, params, args) \
	static inline gx_pfn_##sym gx_orig_##sym(void) { return (gx_pfn_##sym)gx_real(GX_H_##sym); }
#include "hooks.def"

/*
 * Tenant settings, read once from the environment and the tenant's settings
 * file ($GPUEXT_TENANT_DIR/settings.bin, gpuext_devrt_tenant.h).
 */
struct gx_settings {
	int enabled;              /* 0: pass everything through (secure-execution process) */
	int debug;
	uint64_t tenant_id;
	_Atomic uint64_t quota_bytes; /* 0: no quota; follows the settings file (gx_quota) */
	/* per-device quotas (gpuext_devrt_tenant.h): ndevices 0: quota_bytes on every device */
	_Atomic uint32_t ndevices;
	_Atomic uint64_t device_quota[GPUEXT_DEVRT_MAX_DEVICES];
	uint32_t priority_class;  /* GPUEXT_DEVRT_CLASS_* */
	uint64_t lc_window_ns;    /* how long a latency-critical launch counts as pending */
	uint64_t max_delay_ns;    /* longest a best-effort launch waits */
	uint32_t sm_percent;      /* best-effort under MPS: share of the SMs (0 = not set) */
	uint32_t mps_client_priority; /* best-effort under MPS: CUDA_MPS_CLIENT_PRIORITY (0 = normal) */
	int launch_gate;          /* best-effort: launches wait on the board (GPUEXT_DEVRT_TENANT_LAUNCH_GATE) */
	uint32_t host_gpus;       /* the host GPUs the tenant was given (bit per index); 0: not known */
	const char *settings_path; /* the settings file; NULL without GPUEXT_TENANT_DIR */
	const char *acct_dir;
	const char *board_path;
};
extern struct gx_settings gx_cfg;

/*
 * settings.c: the constructor's part (the env only, never in a
 * secure-execution process), then the settings file at the first CUDA call.
 * gx_debug_from_env reads GPUEXT_DEVRT_DEBUG alone, which names no path.
 */
void gx_debug_from_env(void);
void gx_settings_from_env(void);
void gx_settings_load(void);

/* Loads settings, the usage file and the board once; safe from any thread. */
void gx_runtime_init(void);
/* The quota now: re-reads the settings file at most once a second when the host replaced it. */
uint64_t gx_quota(void);
/*
 * The quota of device ordinal dev now (the settings file followed as by
 * gx_quota): 0 when it has none, else 1 and the limit in *limit, which is 0
 * for a device the tenant was not given (or an ordinal it cannot account).
 */
int gx_device_limit(int dev, uint64_t *limit);
/* The device ordinal of the calling thread's current context; 0 without one. */
int gx_current_device(void);
void gx_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define GX_DEBUG(...) do { if (gx_cfg.debug) gx_log(__VA_ARGS__); } while (0)
uint64_t gx_now_ns(void);

/* acct.c: the tenant's usage file */
void gx_acct_open(void);
void gx_acct_after_fork(void);
/* Allocations are accounted on the device ordinal they are made on (dev). */
int gx_acct_reserve(int dev, uint64_t bytes, const char *what); /* 0: reserved; -1: over quota (counted as refused) */
void gx_acct_unreserve(int dev, uint64_t bytes);                 /* driver refused what we reserved */
void gx_acct_commit(int kind, uint64_t key, int dev, uint64_t bytes); /* allocation succeeded: remember its size */
int gx_acct_forget(int kind, uint64_t key, uint64_t *bytes); /* free succeeded: 0 and the size if known */
uint64_t gx_acct_tenant_used(void);
uint64_t gx_acct_device_used(int dev); /* the tenant's bytes on device ordinal dev */
struct gpuext_devrt_usage *gx_acct_usage(void);
int gx_acct_slot(void);
void gx_acct_lc_active(uint64_t now); /* latency-critical launch: deadline now + window, host told if need be */
void gx_acct_lc_busy(uint64_t until); /* latency-critical request begun: its expected end */
enum { GX_KEY_DEVPTR = 1, GX_KEY_HANDLE = 2 };

/* priority.c: called before and after every launch (ptsz: the per-thread stream variant) */
void gx_priority_open(void);
void gx_launch_gate(CUstream s, int ptsz);
void gx_launch_done(CUstream s, int ptsz, CUresult r);
/* priority.c: after a wait for the GPU returned (cuCtx/cuStream/cuEventSynchronize) */
void gx_priority_synced(void);

/*
 * probe_*.c: device probes at image load (docs/device-probes.md). A load
 * wrapper hands its real load as a callback: image is what to load (the
 * caller's or the patched PTX); errlog non-NULL asks for the JIT error log
 * (patched loads only); *handle receives the CUlibrary/CUmodule on success.
 */
typedef CUresult (*gx_load_fn)(void *arg, const void *image, char *errlog, size_t errlog_size, void **handle);
CUresult gx_probe_load(const char *api, int is_library, const void *image, gx_load_fn load, void *arg);
/*
 * Before every launch: binds images loaded before a context was current and,
 * with launch_time, enqueues the launch time for f's module on the launch's
 * stream (ptsz: the per-thread default stream variant). One atomic load when
 * neither applies. f NULL (graphs): binding only.
 */
void gx_probe_before_launch(CUfunction f, CUstream stream, int ptsz);
/*
 * probe_hostlaunch.c: every launch, counted host-side (docs/device-probes.md,
 * "What is measured where"). gx_hl_now before the real launch (0 when probes
 * are off), gx_hl_launch after it with its result; graphs: their kernel
 * nodes at instantiation, counted at each replay.
 */
int64_t gx_hl_now(void);
void gx_hl_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		  CUstream stream, int ptsz, int64_t t_launch, CUresult r);
void gx_hl_graph_instantiated(CUgraphExec exec, void *graph);
void gx_hl_graph_launch(CUgraphExec exec, CUstream stream, int ptsz, CUresult r);
void gx_hl_ctx_ending(CUcontext ctx);
void gx_hl_device_ending(CUdevice dev);
void gx_probe_after_fork(void);
/*
 * Contexts that end: before cuCtxDestroy, and around the release or reset
 * of a device's primary context, the images bound in the context get a
 * last copy of their maps and are unbound (their context is never used
 * again). gx_probe_primary_before returns the primary context for _after.
 */
void gx_probe_ctx_destroy(CUcontext ctx);
/* Before cuLibraryUnload / cuModuleUnload: the image's last copy, then unbound. */
void gx_probe_unload(void *handle);
CUcontext gx_probe_primary_before(CUdevice dev);
void gx_probe_primary_after(CUdevice dev, CUcontext p);
/* A libcuda.so.1 function the interposer calls but does not hook (by the real dlsym), or NULL. */
void *gx_driver_sym(const char *name);

#endif /* GPUEXT_DEVRT_H */
