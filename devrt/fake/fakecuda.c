/*
 * fakecuda.c - a fake libcuda.so.1 for CI, where no GPU exists.
 *
 * It has the CUDA 12/13 driver signatures the device runtime interposes and
 * behaves like a device with 80 GiB (FAKECUDA_TOTAL_BYTES overrides): device
 * pointers are handed out from a counter, cuMemGetInfo_v2 reports
 * free = total - allocated (per process), cuLaunchKernel sleeps
 * FAKECUDA_KERNEL_US microseconds. cuGetProcAddress(_v2) resolves names by
 * cudaVersion and flags to distinct variant functions (_v2, _ptsz), like the
 * real driver. Every call that reaches it is appended to the file named by
 * FAKECUDA_LOG as one line, "pid=<pid> <symbol> <args>", so tests can assert
 * what reached the "driver".
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_min.h"

#define FAKE_API __attribute__((visibility("default")))

static pthread_mutex_t fake_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long fake_next = 0x7f0000000000ull;
static unsigned long long fake_used;

struct fake_alloc {
	unsigned long long ptr, size;
};
static struct fake_alloc fake_allocs[4096];

static void fake_log(const char *fmt, ...)
{
	const char *path = getenv("FAKECUDA_LOG");
	char line[512];
	int n, fd;
	va_list ap;

	if (!path || !*path)
		return;
	n = snprintf(line, sizeof(line), "pid=%d ", (int)getpid());
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
	if (fd < 0)
		return;
	(void)!write(fd, line, (size_t)n);
	close(fd);
}

static unsigned long long fake_total(void)
{
	const char *s = getenv("FAKECUDA_TOTAL_BYTES");

	return s && *s ? strtoull(s, NULL, 10) : 80ull << 30;
}

static CUresult fake_alloc(unsigned long long *out, size_t size)
{
	CUresult r = CUDA_ERROR_OUT_OF_MEMORY;

	pthread_mutex_lock(&fake_mu);
	if (fake_used + size <= fake_total()) {
		for (int i = 0; i < 4096; i++) {
			if (fake_allocs[i].ptr == 0) {
				fake_allocs[i].ptr = fake_next;
				fake_allocs[i].size = size;
				*out = fake_next;
				fake_next += (size + 0xfffffull) & ~0xfffffull;
				fake_next += 0x100000ull;
				fake_used += size;
				r = CUDA_SUCCESS;
				break;
			}
		}
	}
	pthread_mutex_unlock(&fake_mu);
	return r;
}

static CUresult fake_free(unsigned long long ptr)
{
	CUresult r = CUDA_ERROR_INVALID_VALUE;

	pthread_mutex_lock(&fake_mu);
	for (int i = 0; i < 4096; i++) {
		if (fake_allocs[i].ptr == ptr && ptr) {
			fake_used -= fake_allocs[i].size;
			fake_allocs[i].ptr = 0;
			r = CUDA_SUCCESS;
			break;
		}
	}
	pthread_mutex_unlock(&fake_mu);
	return r;
}

FAKE_API CUresult cuInit(unsigned int Flags)
{
	fake_log("cuInit flags=%u", Flags);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuDriverGetVersion(int *v)
{
	fake_log("cuDriverGetVersion");
	if (!v)
		return CUDA_ERROR_INVALID_VALUE;
	*v = 13000;
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	CUresult r = dptr ? fake_alloc(dptr, bytesize) : CUDA_ERROR_INVALID_VALUE;

	fake_log("cuMemAlloc_v2 size=%zu rc=%d", bytesize, r);
	return r;
}

FAKE_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
				     unsigned int ElementSizeBytes)
{
	size_t pitch = (WidthInBytes + 511u) & ~(size_t)511u; /* the real driver aligns rows too */
	CUresult r;

	if (!dptr || !pPitch)
		return CUDA_ERROR_INVALID_VALUE;
	r = fake_alloc(dptr, pitch * Height);
	if (r == CUDA_SUCCESS)
		*pPitch = pitch;
	fake_log("cuMemAllocPitch_v2 width=%zu height=%zu elem=%u pitch=%zu rc=%d", WidthInBytes, Height,
		 ElementSizeBytes, pitch, r);
	return r;
}

FAKE_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	CUresult r = dptr ? fake_alloc(dptr, bytesize) : CUDA_ERROR_INVALID_VALUE;

	fake_log("cuMemAllocManaged size=%zu flags=%u rc=%d", bytesize, flags, r);
	return r;
}

FAKE_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	CUresult r = fake_free(dptr);

	fake_log("cuMemFree_v2 ptr=0x%llx rc=%d", dptr, r);
	return r;
}

FAKE_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
			      unsigned long long flags)
{
	CUresult r = handle ? fake_alloc(handle, size) : CUDA_ERROR_INVALID_VALUE;

	(void)prop;
	fake_log("cuMemCreate size=%zu flags=%llu rc=%d", size, flags, r);
	return r;
}

FAKE_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	CUresult r = fake_free(handle);

	fake_log("cuMemRelease handle=0x%llx rc=%d", handle, r);
	return r;
}

#define FAKE_ASYNC(name)                                                                      \
	FAKE_API CUresult name(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)          \
	{                                                                                     \
		CUresult r = dptr ? fake_alloc(dptr, bytesize) : CUDA_ERROR_INVALID_VALUE;    \
		fake_log(#name " size=%zu stream=%p rc=%d", bytesize, (void *)hStream, r);    \
		return r;                                                                     \
	}
FAKE_ASYNC(cuMemAllocAsync)
FAKE_ASYNC(cuMemAllocAsync_ptsz)

#define FAKE_POOL(name)                                                                                  \
	FAKE_API CUresult name(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)  \
	{                                                                                                \
		CUresult r = dptr ? fake_alloc(dptr, bytesize) : CUDA_ERROR_INVALID_VALUE;               \
		fake_log(#name " size=%zu pool=%p stream=%p rc=%d", bytesize, (void *)pool, (void *)hStream, r); \
		return r;                                                                                \
	}
FAKE_POOL(cuMemAllocFromPoolAsync)
FAKE_POOL(cuMemAllocFromPoolAsync_ptsz)

#define FAKE_FREE_ASYNC(name)                                                    \
	FAKE_API CUresult name(CUdeviceptr dptr, CUstream hStream)               \
	{                                                                        \
		CUresult r = fake_free(dptr);                                    \
		fake_log(#name " ptr=0x%llx stream=%p rc=%d", dptr, (void *)hStream, r); \
		return r;                                                        \
	}
FAKE_FREE_ASYNC(cuMemFreeAsync)
FAKE_FREE_ASYNC(cuMemFreeAsync_ptsz)

FAKE_API CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
	if (!free || !total)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fake_mu);
	*total = fake_total();
	*free = *total - fake_used;
	pthread_mutex_unlock(&fake_mu);
	fake_log("cuMemGetInfo_v2 free=%zu total=%zu", *free, *total);
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemGetInfo(unsigned int *free, unsigned int *total)
{
	size_t f, t;

	cuMemGetInfo_v2(&f, &t);
	*free = f > 0xffffffffu ? 0xffffffffu : (unsigned int)f;
	*total = t > 0xffffffffu ? 0xffffffffu : (unsigned int)t;
	fake_log("cuMemGetInfo");
	return CUDA_SUCCESS;
}

static void fake_kernel_time(void)
{
	const char *s = getenv("FAKECUDA_KERNEL_US");
	long us = s ? atol(s) : 0;

	if (us > 0) {
		struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
		nanosleep(&ts, NULL);
	}
}

#define FAKE_LAUNCH(name)                                                                                       \
	FAKE_API CUresult name(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,   \
			       unsigned int by, unsigned int bz, unsigned int shm, CUstream hStream, void **params, \
			       void **extra)                                                                    \
	{                                                                                                       \
		(void)params;                                                                                   \
		(void)extra;                                                                                    \
		fake_log(#name " f=%p grid=%ux%ux%u block=%ux%ux%u shm=%u stream=%p", (void *)f, gx, gy, gz, bx, \
			 by, bz, shm, (void *)hStream);                                                         \
		fake_kernel_time();                                                                             \
		return CUDA_SUCCESS;                                                                            \
	}
FAKE_LAUNCH(cuLaunchKernel)
FAKE_LAUNCH(cuLaunchKernel_ptsz)

FAKE_API CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
				    void **jitOptionsValues, unsigned int numJitOptions, CUlibraryOption *libraryOptions,
				    void **libraryOptionValues, unsigned int numLibraryOptions)
{
	(void)jitOptions;
	(void)jitOptionsValues;
	(void)libraryOptions;
	(void)libraryOptionValues;
	fake_log("cuLibraryLoadData code=%p jit=%u opts=%u", code, numJitOptions, numLibraryOptions);
	if (library)
		*library = (CUlibrary)0x1000;
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
	fake_log("cuModuleLoadData image=%p", image);
	if (module)
		*module = (CUmodule)0x2000;
	return CUDA_SUCCESS;
}

FAKE_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
FAKE_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
				      CUdriverProcAddressQueryResult *symbolStatus);

/* name, [vmin, ...), per-thread variant?, function: like the real driver's table */
static const struct {
	const char *name;
	int vmin;
	int ptsz; /* -1: no stream variants; 0: legacy; 1: per-thread */
	void *fn;
} fake_table[] = {
	{"cuInit", 2000, -1, (void *)cuInit},
	{"cuDriverGetVersion", 2020, -1, (void *)cuDriverGetVersion},
	{"cuGetProcAddress", 12000, -1, (void *)cuGetProcAddress_v2},
	{"cuGetProcAddress", 11030, -1, (void *)cuGetProcAddress},
	{"cuMemAlloc", 3020, -1, (void *)cuMemAlloc_v2},
	{"cuMemAllocPitch", 3020, -1, (void *)cuMemAllocPitch_v2},
	{"cuMemFree", 3020, -1, (void *)cuMemFree_v2},
	{"cuMemGetInfo", 3020, -1, (void *)cuMemGetInfo_v2},
	{"cuMemGetInfo", 2000, -1, (void *)cuMemGetInfo},
	{"cuMemAllocManaged", 6000, -1, (void *)cuMemAllocManaged},
	{"cuMemCreate", 10020, -1, (void *)cuMemCreate},
	{"cuMemRelease", 10020, -1, (void *)cuMemRelease},
	{"cuMemAllocAsync", 11020, 0, (void *)cuMemAllocAsync},
	{"cuMemAllocAsync", 11020, 1, (void *)cuMemAllocAsync_ptsz},
	{"cuMemAllocFromPoolAsync", 11020, 0, (void *)cuMemAllocFromPoolAsync},
	{"cuMemAllocFromPoolAsync", 11020, 1, (void *)cuMemAllocFromPoolAsync_ptsz},
	{"cuMemFreeAsync", 11020, 0, (void *)cuMemFreeAsync},
	{"cuMemFreeAsync", 11020, 1, (void *)cuMemFreeAsync_ptsz},
	{"cuLaunchKernel", 4000, 0, (void *)cuLaunchKernel},
	{"cuLaunchKernel", 7000, 1, (void *)cuLaunchKernel_ptsz},
	{"cuLibraryLoadData", 12000, -1, (void *)cuLibraryLoadData},
	{"cuModuleLoadData", 2000, -1, (void *)cuModuleLoadData},
};

static CUresult fake_lookup(const char *how, const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
			    CUdriverProcAddressQueryResult *st)
{
	int ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0, found = 0;

	if (!symbol || !pfn)
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = NULL;
	/* entries for one name are ordered newest first */
	for (size_t i = 0; i < sizeof(fake_table) / sizeof(fake_table[0]); i++) {
		if (strcmp(fake_table[i].name, symbol) != 0)
			continue;
		found = 1;
		if (cudaVersion < fake_table[i].vmin || (fake_table[i].ptsz >= 0 && fake_table[i].ptsz != ptsz))
			continue;
		*pfn = fake_table[i].fn;
		break;
	}
	fake_log("%s symbol=%s version=%d flags=%llu -> %s", how, symbol, cudaVersion, (unsigned long long)flags,
		 *pfn ? "found" : found ? "version-not-sufficient" : "not-found");
	if (st)
		*st = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS
			   : found ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

FAKE_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	return fake_lookup("cuGetProcAddress", symbol, pfn, cudaVersion, flags, NULL);
}

FAKE_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
				      CUdriverProcAddressQueryResult *symbolStatus)
{
	return fake_lookup("cuGetProcAddress_v2", symbol, pfn, cudaVersion, flags, symbolStatus);
}
