/*
 * app_linked.c - a test app linked with -lcuda: it calls the driver's exported
 * symbols directly (the path a preloaded library interposes by name). Runs the
 * steps of steps.h.
 */
#include "steps.h"

CUresult cuInit(unsigned int);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemAllocPitch_v2(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
CUresult cuMemAllocManaged(CUdeviceptr *, size_t, unsigned int);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemCreate(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
CUresult cuMemRelease(CUmemGenericAllocationHandle);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, CUstream);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *, size_t, CUstream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuMemGetInfo(unsigned int *, unsigned int *);
CUresult cuLaunchKernel(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
			unsigned int, unsigned int, CUstream, void **, void **);
CUresult cuLaunchKernel_ptsz(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
			     unsigned int, unsigned int, CUstream, void **, void **);
CUresult cuLibraryLoadData(CUlibrary *, const void *, CUjit_option *, void **, unsigned int, CUlibraryOption *,
			   void **, unsigned int);
CUresult cuModuleLoadData(CUmodule *, const void *);
CUresult cuCtxSynchronize(void);

int main(int argc, char **argv)
{
	const struct app_api api = {
		.init = cuInit,
		.alloc = cuMemAlloc_v2,
		.pitch = cuMemAllocPitch_v2,
		.managed = cuMemAllocManaged,
		.free_ = cuMemFree_v2,
		.create = cuMemCreate,
		.release = cuMemRelease,
		.async = cuMemAllocAsync,
		.async_ptsz = cuMemAllocAsync_ptsz,
		.pool = cuMemAllocFromPoolAsync,
		.free_async = cuMemFreeAsync,
		.free_async_ptsz = cuMemFreeAsync_ptsz,
		.info = cuMemGetInfo_v2,
		.info_v1 = cuMemGetInfo,
		.launch = cuLaunchKernel,
		.launch_ptsz = cuLaunchKernel_ptsz,
		.library_load = cuLibraryLoadData,
		.module_load = cuModuleLoadData,
		.sync = cuCtxSynchronize,
	};

	return app_run(&api, argc, argv);
}
