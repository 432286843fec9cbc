/*
 * app_procaddr.c - a test app that finds the driver the way cudart (static or
 * shared) does: dlopen("libcuda.so.1"), one dlsym for "cuGetProcAddress_v2",
 * then every entry point through it with a CUDA version and flags (2 for the
 * per-thread-stream variants). Runs the steps of steps.h.
 * APP_CUDA_VERSION overrides the version asked for (default 12000).
 */
#include "steps.h"

typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static gpa_fn gpa;
static int version = 12000;

static void *resolve(const char *name, cuuint64_t flags)
{
	void *p = NULL;
	CUdriverProcAddressQueryResult st = -1;

	if (gpa(name, &p, version, flags, &st) != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS)
		return NULL;
	return p;
}

int main(int argc, char **argv)
{
	struct app_api api;
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	const char *v = getenv("APP_CUDA_VERSION");

	if (v)
		version = atoi(v);
	if (!h || !(gpa = (gpa_fn)dlsym(h, "cuGetProcAddress_v2"))) {
		printf("no driver\n");
		return 1;
	}
	/* like cudart: the lookup function itself is looked up through the lookup */
	gpa = (gpa_fn)resolve("cuGetProcAddress", 0);
	if (!gpa) {
		printf("no cuGetProcAddress through the lookup\n");
		return 1;
	}
	api.init = (CUresult (*)(unsigned int))resolve("cuInit", 0);
	api.alloc = (CUresult (*)(CUdeviceptr *, size_t))resolve("cuMemAlloc", 0);
	api.pitch = (CUresult (*)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int))resolve("cuMemAllocPitch", 0);
	api.managed = (CUresult (*)(CUdeviceptr *, size_t, unsigned int))resolve("cuMemAllocManaged", 0);
	api.free_ = (CUresult (*)(CUdeviceptr))resolve("cuMemFree", 0);
	api.create = (CUresult (*)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
				   unsigned long long))resolve("cuMemCreate", 0);
	api.release = (CUresult (*)(CUmemGenericAllocationHandle))resolve("cuMemRelease", 0);
	api.async = (CUresult (*)(CUdeviceptr *, size_t, CUstream))resolve("cuMemAllocAsync", 0);
	api.async_ptsz = (CUresult (*)(CUdeviceptr *, size_t, CUstream))resolve("cuMemAllocAsync", 2);
	api.pool = (CUresult (*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream))resolve("cuMemAllocFromPoolAsync", 0);
	api.free_async = (CUresult (*)(CUdeviceptr, CUstream))resolve("cuMemFreeAsync", 0);
	api.free_async_ptsz = (CUresult (*)(CUdeviceptr, CUstream))resolve("cuMemFreeAsync", 2);
	api.info = (CUresult (*)(size_t *, size_t *))resolve("cuMemGetInfo", 0);
	api.info_v1 = NULL;
	api.launch = (CUresult (*)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
				   unsigned int, unsigned int, CUstream, void **, void **))resolve("cuLaunchKernel", 0);
	api.launch_ptsz = (CUresult (*)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
					unsigned int, unsigned int, unsigned int, CUstream, void **,
					void **))resolve("cuLaunchKernel", 2);
	api.library_load = (CUresult (*)(CUlibrary *, const void *, CUjit_option *, void **, unsigned int,
					 CUlibraryOption *, void **, unsigned int))resolve("cuLibraryLoadData", 0);
	api.module_load = (CUresult (*)(CUmodule *, const void *))resolve("cuModuleLoadData", 0);
	api.sync = (CUresult (*)(void))resolve("cuCtxSynchronize", 0);
	if (!api.init || !api.alloc || !api.pitch || !api.managed || !api.free_ || !api.create || !api.release ||
	    !api.async || !api.async_ptsz || !api.pool || !api.free_async || !api.free_async_ptsz || !api.info ||
	    !api.launch || !api.launch_ptsz || !api.library_load || !api.module_load) {
		printf("lookup failed\n");
		return 1;
	}
	return app_run(&api, argc, argv);
}
