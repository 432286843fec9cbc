/*
 * wrappers.c - the interposed CUDA driver and NVML entry points, one per
 * variant in hooks.def. Each calls the original pointer of its own variant.
 * Allocations are reserved against the tenant's quota on their device (the
 * current context's, or the one cuMemCreate names) before the driver sees
 * them; memory info is clamped to the current device's quota; launches pass the priority gate;
 * image loads go through the device probes (probe_load.c).
 */
#define _GNU_SOURCE
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "devrt.h"

#define GX_REAL_OR(sym, err)                    \
	gx_pfn_##sym real = gx_orig_##sym();    \
	if (!real)                              \
		return err

CUresult cuInit(unsigned int Flags)
{
	GX_REAL_OR(cuInit, CUDA_ERROR_NOT_INITIALIZED);
	gx_runtime_init();
	return real(Flags);
}

typedef CUresult (*gx_ctx_get_device_fn)(CUdevice *);

int gx_current_device(void)
{
	static _Atomic(gx_ctx_get_device_fn) get;
	gx_ctx_get_device_fn f = atomic_load(&get);
	CUdevice dev = 0;

	if (!f) {
		f = (gx_ctx_get_device_fn)gx_driver_sym("cuCtxGetDevice");
		if (!f)
			return 0;
		atomic_store(&get, f);
	}
	if (f(&dev) != CUDA_SUCCESS || dev < 0)
		return 0; /* no current context: the call that follows fails in the driver, or makes one on device 0 */
	return (int)dev;
}

/* reserve on dev, call, then commit or undo: the body shared by every allocating entry point */
#define GX_ALLOC_ON(dev, what, kind, keyp, bytes, call)                       \
	do {                                                                  \
		CUresult r_;                                                  \
		int d_ = (dev);                                               \
		uint64_t n_ = (uint64_t)(bytes);                              \
		if (gx_acct_reserve(d_, n_, what) != 0)                       \
			return CUDA_ERROR_OUT_OF_MEMORY;                      \
		r_ = (call);                                                  \
		if (r_ != CUDA_SUCCESS || !(keyp))                            \
			gx_acct_unreserve(d_, n_);                            \
		else                                                          \
			gx_acct_commit(kind, (uint64_t) * (keyp), d_, n_);    \
		return r_;                                                    \
	} while (0)
#define GX_ALLOC(what, kind, keyp, bytes, call) GX_ALLOC_ON(gx_current_device(), what, kind, keyp, bytes, call)

/*
 * The device a cuMemCreate allocates on: CUmemAllocationProp's location
 * (documented layout: type and requestedHandleTypes, then the CUmemLocation
 * {type, id} at offset 8), when it is a device (CU_MEM_LOCATION_TYPE_DEVICE,
 * 1); else the current context's.
 */
static int gx_prop_device(const CUmemAllocationProp *prop)
{
	int loc[2];

	if (!prop)
		return gx_current_device();
	memcpy(loc, (const char *)prop + 8, sizeof(loc));
	return loc[0] == 1 && loc[1] >= 0 ? loc[1] : gx_current_device();
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	GX_REAL_OR(cuMemAlloc_v2, CUDA_ERROR_NOT_INITIALIZED);
	GX_ALLOC("cuMemAlloc_v2", GX_KEY_DEVPTR, dptr, bytesize, real(dptr, bytesize));
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	GX_REAL_OR(cuMemAllocManaged, CUDA_ERROR_NOT_INITIALIZED);
	GX_ALLOC("cuMemAllocManaged", GX_KEY_DEVPTR, dptr, bytesize, real(dptr, bytesize, flags));
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
		     unsigned long long flags)
{
	GX_REAL_OR(cuMemCreate, CUDA_ERROR_NOT_INITIALIZED);
	GX_ALLOC_ON(gx_prop_device(prop), "cuMemCreate", GX_KEY_HANDLE, handle, size, real(handle, size, prop, flags));
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	GX_REAL_OR(cuMemAllocAsync, CUDA_ERROR_NOT_INITIALIZED);
	GX_ALLOC("cuMemAllocAsync", GX_KEY_DEVPTR, dptr, bytesize, real(dptr, bytesize, hStream));
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	GX_REAL_OR(cuMemAllocAsync_ptsz, CUDA_ERROR_NOT_INITIALIZED);
	GX_ALLOC("cuMemAllocAsync_ptsz", GX_KEY_DEVPTR, dptr, bytesize, real(dptr, bytesize, hStream));
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
	GX_REAL_OR(cuMemAllocFromPoolAsync, CUDA_ERROR_NOT_INITIALIZED);
	GX_ALLOC("cuMemAllocFromPoolAsync", GX_KEY_DEVPTR, dptr, bytesize, real(dptr, bytesize, pool, hStream));
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
	GX_REAL_OR(cuMemAllocFromPoolAsync_ptsz, CUDA_ERROR_NOT_INITIALIZED);
	GX_ALLOC("cuMemAllocFromPoolAsync_ptsz", GX_KEY_DEVPTR, dptr, bytesize, real(dptr, bytesize, pool, hStream));
}

/*
 * Pitch: the driver picks the pitch. Reserve width rounded up to 512 bytes per
 * row first, then settle to pitch * height; if the real size no longer fits,
 * give the memory back and refuse.
 */
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
			    unsigned int ElementSizeBytes)
{
	uint64_t guess = (((uint64_t)WidthInBytes + 511u) & ~(uint64_t)511u) * (uint64_t)Height, real_size;
	CUresult r;
	int dev;

	GX_REAL_OR(cuMemAllocPitch_v2, CUDA_ERROR_NOT_INITIALIZED);
	dev = gx_current_device();
	if (gx_acct_reserve(dev, guess, "cuMemAllocPitch_v2") != 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = real(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
	if (r != CUDA_SUCCESS || !dptr || !pPitch) {
		gx_acct_unreserve(dev, guess);
		return r;
	}
	real_size = (uint64_t)*pPitch * (uint64_t)Height;
	if (real_size > guess) {
		if (gx_acct_reserve(dev, real_size - guess, "cuMemAllocPitch_v2 (pitch)") != 0) {
			gx_acct_unreserve(dev, guess);
			gx_pfn_cuMemFree_v2 f = gx_orig_cuMemFree_v2();
			if (f)
				f(*dptr);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	} else {
		gx_acct_unreserve(dev, guess - real_size);
	}
	gx_acct_commit(GX_KEY_DEVPTR, (uint64_t)*dptr, dev, real_size);
	return r;
}

/* free: the driver first; only memory it really released leaves the account */
#define GX_FREE(what, kind, key, call)                                             \
	do {                                                                       \
		uint64_t n_ = 0;                                                   \
		CUresult r_ = (call);                                              \
		if (r_ == CUDA_SUCCESS && gx_acct_forget(kind, (uint64_t)(key), &n_) == 0) \
			GX_DEBUG("%s %llu freed", what, (unsigned long long)n_);   \
		return r_;                                                         \
	} while (0)

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	GX_REAL_OR(cuMemFree_v2, CUDA_ERROR_NOT_INITIALIZED);
	GX_FREE("cuMemFree_v2", GX_KEY_DEVPTR, dptr, real(dptr));
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	GX_REAL_OR(cuMemRelease, CUDA_ERROR_NOT_INITIALIZED);
	GX_FREE("cuMemRelease", GX_KEY_HANDLE, handle, real(handle));
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	GX_REAL_OR(cuMemFreeAsync, CUDA_ERROR_NOT_INITIALIZED);
	GX_FREE("cuMemFreeAsync", GX_KEY_DEVPTR, dptr, real(dptr, hStream));
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
	GX_REAL_OR(cuMemFreeAsync_ptsz, CUDA_ERROR_NOT_INITIALIZED);
	GX_FREE("cuMemFreeAsync_ptsz", GX_KEY_DEVPTR, dptr, real(dptr, hStream));
}

/*
 * The tenant's view of device dev: total = its quota there, free = quota -
 * the tenant's usage there, never above the device's real free.
 */
static int gx_clamp(int dev, uint64_t real_free, uint64_t *free_out, uint64_t *total_out, uint64_t *used_out)
{
	uint64_t used, f, quota;

	gx_runtime_init();
	if (!gx_cfg.enabled || !gx_device_limit(dev, &quota))
		return 0;
	used = gx_acct_device_used(dev);
	f = used >= quota ? 0 : quota - used;
	if (f > real_free)
		f = real_free;
	*free_out = f;
	*total_out = quota;
	if (used_out)
		*used_out = used > quota ? quota : used;
	GX_DEBUG("memory info clamped: free=%llu total=%llu", (unsigned long long)f,
		 (unsigned long long)quota);
	return 1;
}

CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
	uint64_t f, t;
	CUresult r;

	GX_REAL_OR(cuMemGetInfo_v2, CUDA_ERROR_NOT_INITIALIZED);
	r = real(free, total);
	if (r == CUDA_SUCCESS && free && total && gx_clamp(gx_current_device(), *free, &f, &t, NULL)) {
		*free = (size_t)f;
		*total = (size_t)t;
	}
	return r;
}

CUresult cuMemGetInfo(unsigned int *free, unsigned int *total)
{
	uint64_t f, t;
	CUresult r;

	GX_REAL_OR(cuMemGetInfo, CUDA_ERROR_NOT_INITIALIZED);
	r = real(free, total);
	if (r == CUDA_SUCCESS && free && total && gx_clamp(gx_current_device(), *free, &f, &t, NULL)) {
		*free = f > UINT_MAX ? UINT_MAX : (unsigned int)f;
		*total = t > UINT_MAX ? UINT_MAX : (unsigned int)t;
	}
	return r;
}

#define NVML_ERROR_UNINITIALIZED 1

/*
 * The CUDA device ordinal of an NVML handle, whose quota NVML reports.
 * NVML numbers every GPU whose device node the process reaches (all of the
 * host's where the tenant is not in a container); CUDA numbers those that
 * CUDA_VISIBLE_DEVICES names, in its order. So the ordinal is the position
 * of the GPU in CUDA_VISIBLE_DEVICES, named by its UUID (or a prefix of it)
 * or by its NVML index (CUDA's index in CUDA_DEVICE_ORDER=PCI_BUS_ID order,
 * which the device plugin sets); without the variable, the NVML index (a
 * container given its GPUs' device nodes sees them numbered alike). -1: a
 * GPU CUDA does not show the process (past the list, or past an entry that
 * names no GPU, where CUDA's list ends); 0 when NVML cannot say.
 */
static int gx_nvml_device(nvmlDevice_t device)
{
	typedef nvmlReturn_t (*index_fn)(nvmlDevice_t, unsigned int *);
	typedef nvmlReturn_t (*uuid_fn)(nvmlDevice_t, char *, unsigned int);
	gx_dlsym_fn real = gx_dlsym_real();
	void *lib = gx_lib(GX_LIB_NVML, 0);
	index_fn f = real && lib ? (index_fn)real(lib, "nvmlDeviceGetIndex") : NULL;
	uuid_fn fu = real && lib ? (uuid_fn)real(lib, "nvmlDeviceGetUUID") : NULL;
	const char *vis = getenv(GPUEXT_ENV_CUDA_VISIBLE_DEVICES), *p;
	char uuid[96];
	unsigned int i = 0;
	int ord;

	if (!f || f(device, &i) != NVML_SUCCESS)
		return 0;
	if (!vis)
		return i < GPUEXT_DEVRT_MAX_DEVICES ? (int)i : -1;
	if (!fu || fu(device, uuid, sizeof(uuid)) != NVML_SUCCESS)
		uuid[0] = 0;
	uuid[sizeof(uuid) - 1] = 0;
	for (p = vis, ord = 0; *p && ord < (int)GPUEXT_DEVRT_MAX_DEVICES; ord++) {
		size_t n = strcspn(p, ","), d = strspn(p, "0123456789");

		if (n > 4 && !strncmp(p, "GPU-", 4)) {
			if (uuid[0] && !strncmp(uuid, p, n))
				return ord;
		} else if (d == n && n > 0 && n < 10) {
			if (strtoul(p, NULL, 10) == i)
				return ord;
		} else {
			return -1; /* MIG-..., or no GPU: CUDA's list ends here */
		}
		p += n;
		if (*p == ',')
			p++;
	}
	return -1;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	uint64_t f, t, u;
	nvmlReturn_t r;

	GX_REAL_OR(nvmlDeviceGetMemoryInfo, NVML_ERROR_UNINITIALIZED);
	r = real(device, memory);
	if (r == NVML_SUCCESS && memory && gx_clamp(gx_nvml_device(device), memory->free, &f, &t, &u)) {
		memory->free = f;
		memory->total = t;
		memory->used = u;
	}
	return r;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
	uint64_t f, t, u;
	nvmlReturn_t r;

	GX_REAL_OR(nvmlDeviceGetMemoryInfo_v2, NVML_ERROR_UNINITIALIZED);
	r = real(device, memory);
	if (r == NVML_SUCCESS && memory && gx_clamp(gx_nvml_device(device), memory->free, &f, &t, &u)) {
		memory->free = f;
		memory->total = t;
		memory->used = u;
		memory->reserved = 0;
	}
	return r;
}

/*
 * The stream of a CUlaunchConfig (documented layout: seven unsigned ints -
 * grid, block, shared memory - then the CUstream at offset 32).
 */
static CUstream gx_config_stream(const CUlaunchConfig *config)
{
	CUstream s = NULL;

	if (config)
		memcpy(&s, (const char *)config + 32, sizeof(s));
	return s;
}

/* A cuLaunchKernelEx's grid and block (the config's first six unsigned ints), counted host-side. */
static CUresult gx_config_launched(const CUlaunchConfig *config, CUfunction f, int ptsz, int64_t t, CUresult r)
{
	unsigned d[6] = {0};

	if (config)
		memcpy(d, config, sizeof(d));
	gx_hl_launch(f, d[0], d[1], d[2], d[3], d[4], d[5], gx_config_stream(config), ptsz, t, config ? r : -1);
	return r;
}

/* launches: the priority gate, then the variant's own driver entry */
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
			unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
			unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
	GX_REAL_OR(cuLaunchKernel, CUDA_ERROR_NOT_INITIALIZED);
	gx_launch_gate(hStream, 0);
	gx_probe_before_launch(f, hStream, 0);
	int64_t t = gx_hl_now();
	CUresult r = real(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
			  kernelParams, extra);
	gx_launch_done(hStream, 0, r);
	gx_hl_launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, 0, t, r);
	return r;
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
			     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
			     unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
	GX_REAL_OR(cuLaunchKernel_ptsz, CUDA_ERROR_NOT_INITIALIZED);
	gx_launch_gate(hStream, 1);
	gx_probe_before_launch(f, hStream, 1);
	int64_t t = gx_hl_now();
	CUresult r = real(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
			  kernelParams, extra);
	gx_launch_done(hStream, 1, r);
	gx_hl_launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, 1, t, r);
	return r;
}

/* cooperative launches: like cuLaunchKernel (the gate, the probes, counted host-side) */
#define GX_COOPERATIVE_WRAPPER(sym, ptsz)                                                                         \
	CUresult sym(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,            \
		     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, \
		     CUstream hStream, void **kernelParams)                                                         \
	{                                                                                                           \
		GX_REAL_OR(sym, CUDA_ERROR_NOT_INITIALIZED);                                                        \
		gx_launch_gate(hStream, ptsz);                                                                      \
		gx_probe_before_launch(f, hStream, ptsz);                                                           \
		int64_t t = gx_hl_now();                                                                            \
		CUresult r = real(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, \
				  hStream, kernelParams);                                                           \
		gx_launch_done(hStream, ptsz, r);                                                                   \
		gx_hl_launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream, ptsz, t, r); \
		return r;                                                                                           \
	}
GX_COOPERATIVE_WRAPPER(cuLaunchCooperativeKernel, 0)
GX_COOPERATIVE_WRAPPER(cuLaunchCooperativeKernel_ptsz, 1)
#undef GX_COOPERATIVE_WRAPPER

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
	GX_REAL_OR(cuLaunchKernelEx, CUDA_ERROR_NOT_INITIALIZED);
	gx_launch_gate(gx_config_stream(config), 0);
	gx_probe_before_launch(f, gx_config_stream(config), 0);
	int64_t t = gx_hl_now();
	CUresult r = real(config, f, kernelParams, extra);
	gx_launch_done(gx_config_stream(config), 0, r);
	return gx_config_launched(config, f, 0, t, r);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
	GX_REAL_OR(cuLaunchKernelEx_ptsz, CUDA_ERROR_NOT_INITIALIZED);
	gx_launch_gate(gx_config_stream(config), 1);
	gx_probe_before_launch(f, gx_config_stream(config), 1);
	int64_t t = gx_hl_now();
	CUresult r = real(config, f, kernelParams, extra);
	gx_launch_done(gx_config_stream(config), 1, r);
	return gx_config_launched(config, f, 1, t, r);
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	GX_REAL_OR(cuGraphLaunch, CUDA_ERROR_NOT_INITIALIZED);
	gx_launch_gate(hStream, 0);
	gx_probe_before_launch(NULL, hStream, 0);
	CUresult r = real(hGraphExec, hStream);
	gx_launch_done(hStream, 0, r);
	gx_hl_graph_launch(hGraphExec, hStream, 0, r);
	return r;
}

CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	GX_REAL_OR(cuGraphLaunch_ptsz, CUDA_ERROR_NOT_INITIALIZED);
	gx_launch_gate(hStream, 1);
	gx_probe_before_launch(NULL, hStream, 1);
	CUresult r = real(hGraphExec, hStream);
	gx_launch_done(hStream, 1, r);
	gx_hl_graph_launch(hGraphExec, hStream, 1, r);
	return r;
}

/*
 * Waits for the GPU: a latency-critical tenant's pending window counts from
 * the end of its work, not only from its launches (priority.c), so a request
 * that finished late still covers the gap to the next one.
 */
#define GX_SYNC_WRAPPER(sym, params, args)                     \
	CUresult sym params                                     \
	{                                                       \
		GX_REAL_OR(sym, CUDA_ERROR_NOT_INITIALIZED);    \
		CUresult r = real args;                         \
		gx_priority_synced();                           \
		return r;                                       \
	}
GX_SYNC_WRAPPER(cuCtxSynchronize, (void), ())
GX_SYNC_WRAPPER(cuStreamSynchronize, (CUstream hStream), (hStream))
GX_SYNC_WRAPPER(cuStreamSynchronize_ptsz, (CUstream hStream), (hStream))
GX_SYNC_WRAPPER(cuEventSynchronize, (CUevent hEvent), (hEvent))
#undef GX_SYNC_WRAPPER

/* instantiations: the graph's kernel nodes, which its replays launch (probe_hostlaunch.c) */
CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
	GX_REAL_OR(cuGraphInstantiateWithFlags, CUDA_ERROR_NOT_INITIALIZED);
	CUresult r = real(phGraphExec, hGraph, flags);
	if (r == CUDA_SUCCESS && phGraphExec)
		gx_hl_graph_instantiated(*phGraphExec, hGraph);
	return r;
}

#define GX_INSTANTIATE_PARAMS_WRAPPER(sym)                                                          \
	CUresult sym(CUgraphExec *phGraphExec, CUgraph hGraph, void *instantiateParams)            \
	{                                                                                           \
		GX_REAL_OR(sym, CUDA_ERROR_NOT_INITIALIZED);                                        \
		CUresult r = real(phGraphExec, hGraph, instantiateParams);                          \
		if (r == CUDA_SUCCESS && phGraphExec)                                               \
			gx_hl_graph_instantiated(*phGraphExec, hGraph);                             \
		return r;                                                                           \
	}
GX_INSTANTIATE_PARAMS_WRAPPER(cuGraphInstantiateWithParams)
GX_INSTANTIATE_PARAMS_WRAPPER(cuGraphInstantiateWithParams_ptsz)
#undef GX_INSTANTIATE_PARAMS_WRAPPER

/*
 * image loads: through the device probes (probe_load.c), which load either the
 * caller's image or its patched PTX with the caller's options; a patched
 * load also asks for the JIT error log unless the caller already does.
 */
#define GX_MAX_JIT_OPTS 64

/* the caller's JIT options plus the error log, if there is room and the caller has none */
static unsigned int gx_jit_opts(CUjit_option *opts, void **vals, unsigned int n, CUjit_option *o, void **v,
				char *errlog, size_t errlog_size)
{
	if (!errlog || n + 2 > GX_MAX_JIT_OPTS)
		return 0;
	for (unsigned int k = 0; k < n; k++) {
		if (opts[k] == CU_JIT_ERROR_LOG_BUFFER || opts[k] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
			return 0;
		o[k] = opts[k];
		v[k] = vals ? vals[k] : NULL;
	}
	o[n] = CU_JIT_ERROR_LOG_BUFFER;
	v[n] = errlog;
	o[n + 1] = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES;
	v[n + 1] = (void *)(uintptr_t)errlog_size;
	return n + 2;
}

struct gx_library_load {
	gx_pfn_cuLibraryLoadData real;
	CUlibrary *library;
	CUjit_option *jitOptions;
	void **jitOptionsValues;
	unsigned int numJitOptions;
	CUlibraryOption *libraryOptions;
	void **libraryOptionValues;
	unsigned int numLibraryOptions;
};

static CUresult gx_library_load_fn(void *arg, const void *image, char *errlog, size_t errlog_size, void **handle)
{
	struct gx_library_load *a = arg;
	CUjit_option o[GX_MAX_JIT_OPTS];
	void *v[GX_MAX_JIT_OPTS];
	unsigned int n = gx_jit_opts(a->jitOptions, a->jitOptionsValues, a->numJitOptions, o, v, errlog, errlog_size);
	CUresult r;

	if (n)
		r = a->real(a->library, image, o, v, n, a->libraryOptions, a->libraryOptionValues, a->numLibraryOptions);
	else
		r = a->real(a->library, image, a->jitOptions, a->jitOptionsValues, a->numJitOptions, a->libraryOptions,
			    a->libraryOptionValues, a->numLibraryOptions);
	if (r == CUDA_SUCCESS && a->library)
		*handle = (void *)*a->library;
	return r;
}

CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions, void **jitOptionsValues,
			   unsigned int numJitOptions, CUlibraryOption *libraryOptions, void **libraryOptionValues,
			   unsigned int numLibraryOptions)
{
	struct gx_library_load a = {NULL, library, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
				    libraryOptionValues, numLibraryOptions};

	a.real = gx_orig_cuLibraryLoadData();
	if (!a.real)
		return CUDA_ERROR_NOT_INITIALIZED;
	return gx_probe_load("cuLibraryLoadData", 1, code, gx_library_load_fn, &a);
}

/* module loads: a patched image goes through cuModuleLoadDataEx (for the error log) where the driver has it */
struct gx_module_load {
	CUresult (*plain)(CUmodule *, const void *); /* cuModuleLoadData or cuModuleLoadFatBinary */
	CUmodule *module;
	unsigned int numOptions;
	CUjit_option *options;
	void **optionValues;
};

static CUresult gx_module_load_fn(void *arg, const void *image, char *errlog, size_t errlog_size, void **handle)
{
	struct gx_module_load *a = arg;
	gx_pfn_cuModuleLoadDataEx ex = gx_orig_cuModuleLoadDataEx();
	CUjit_option o[GX_MAX_JIT_OPTS];
	void *v[GX_MAX_JIT_OPTS];
	unsigned int n = 0;
	CUresult r;

	if (errlog && ex)
		n = gx_jit_opts(a->options, a->optionValues, a->numOptions, o, v, errlog, errlog_size);
	if (n)
		r = ex(a->module, image, n, o, v);
	else if (a->plain)
		r = a->plain(a->module, image);
	else if (ex)
		r = ex(a->module, image, a->numOptions, a->options, a->optionValues);
	else
		r = CUDA_ERROR_NOT_INITIALIZED;
	if (r == CUDA_SUCCESS && a->module)
		*handle = (void *)*a->module;
	return r;
}

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	GX_REAL_OR(cuCtxDestroy_v2, CUDA_ERROR_NOT_INITIALIZED);
	gx_probe_ctx_destroy(ctx);
	gx_hl_ctx_ending(ctx);
	return real(ctx);
}

/* A primary context's release or reset, which may end it: the probes' images in it see it end. */
static CUresult gx_primary_end(CUresult (*real)(CUdevice), CUdevice dev)
{
	CUcontext p = gx_probe_primary_before(dev);
	CUresult r;

	gx_hl_device_ending(dev);
	r = real(dev);

	gx_probe_primary_after(dev, p);
	return r;
}

/* the release and the reset, each as _v2 and as the CUDA 7-10 variant, which a runtime may still ask for by version */
#define GX_PRIMARY_END_WRAPPER(sym)                              \
	CUresult sym(CUdevice dev)                               \
	{                                                        \
		GX_REAL_OR(sym, CUDA_ERROR_NOT_INITIALIZED);     \
		return gx_primary_end(real, dev);                \
	}
GX_PRIMARY_END_WRAPPER(cuDevicePrimaryCtxRelease_v2)
GX_PRIMARY_END_WRAPPER(cuDevicePrimaryCtxReset_v2)
GX_PRIMARY_END_WRAPPER(cuDevicePrimaryCtxRelease)
GX_PRIMARY_END_WRAPPER(cuDevicePrimaryCtxReset)
#undef GX_PRIMARY_END_WRAPPER

CUresult cuLibraryUnload(CUlibrary library)
{
	GX_REAL_OR(cuLibraryUnload, CUDA_ERROR_NOT_INITIALIZED);
	gx_probe_unload((void *)library);
	return real(library);
}

CUresult cuModuleUnload(CUmodule hmod)
{
	GX_REAL_OR(cuModuleUnload, CUDA_ERROR_NOT_INITIALIZED);
	gx_probe_unload((void *)hmod);
	return real(hmod);
}

CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
	struct gx_module_load a = {gx_orig_cuModuleLoadData(), module, 0, NULL, NULL};

	if (!a.plain)
		return CUDA_ERROR_NOT_INITIALIZED;
	return gx_probe_load("cuModuleLoadData", 0, image, gx_module_load_fn, &a);
}

CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions, CUjit_option *options,
			    void **optionValues)
{
	struct gx_module_load a = {NULL, module, numOptions, options, optionValues};

	if (!gx_orig_cuModuleLoadDataEx())
		return CUDA_ERROR_NOT_INITIALIZED;
	return gx_probe_load("cuModuleLoadDataEx", 0, image, gx_module_load_fn, &a);
}

CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
	struct gx_module_load a = {gx_orig_cuModuleLoadFatBinary(), module, 0, NULL, NULL};

	if (!a.plain)
		return CUDA_ERROR_NOT_INITIALIZED;
	return gx_probe_load("cuModuleLoadFatBinary", 0, fatCubin, gx_module_load_fn, &a);
}
