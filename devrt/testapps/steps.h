/*
 * steps.h - the scripted CUDA driver sequence shared by the test apps.
 *
 * Each argument is a step; each step prints exactly one line on stdout:
 *   alloc|managed|create|async|asyncptsz|pool SIZE  -> "<verb> <bytes> ok" | "<verb> <bytes> CUDA_ERROR_OUT_OF_MEMORY" | "<verb> <bytes> rc=N"
 *   pitch WIDTH HEIGHT                             -> "pitch W H ok pitch=P"
 *   free I            (I-th successful allocation) -> "free I ok" (uses the matching free entry point)
 *   info | infov1                                  -> "info free=F total=T"
 *   launch N | launchptsz N                        -> "launch N ok us=ELAPSED"
 *   load                                           -> "load ok" (cuLibraryLoadData + cuModuleLoadData)
 *   nvml                                           -> "nvml free=F total=T used=U" (dlopen libnvidia-ml.so.1)
 *   nvmlidx I         (NVML's device I)            -> "nvml dev=I free=F total=T used=U"
 *   sleep MS                                       -> "sleep MS"
 *   device N          (N-th device's primary context current) -> "device N ok" | "device N rc=R"
 *   env NAME          (as the process sees it now) -> "env NAME=VALUE" | "env NAME unset"
 *   hold                                           -> "hold", then waits to be killed
 * SIZE accepts a KiB/MiB/GiB suffix.
 */
#ifndef GPUEXT_TESTAPP_STEPS_H
#define GPUEXT_TESTAPP_STEPS_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_min.h"

struct app_api {
	CUresult (*init)(unsigned int);
	CUresult (*alloc)(CUdeviceptr *, size_t);
	CUresult (*pitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
	CUresult (*managed)(CUdeviceptr *, size_t, unsigned int);
	CUresult (*free_)(CUdeviceptr);
	CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
	CUresult (*release)(CUmemGenericAllocationHandle);
	CUresult (*async)(CUdeviceptr *, size_t, CUstream);
	CUresult (*async_ptsz)(CUdeviceptr *, size_t, CUstream);
	CUresult (*pool)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
	CUresult (*free_async)(CUdeviceptr, CUstream);
	CUresult (*free_async_ptsz)(CUdeviceptr, CUstream);
	CUresult (*info)(size_t *, size_t *);
	CUresult (*info_v1)(unsigned int *, unsigned int *);
	CUresult (*launch)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
			   unsigned int, unsigned int, CUstream, void **, void **);
	CUresult (*launch_ptsz)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
				unsigned int, unsigned int, CUstream, void **, void **);
	CUresult (*library_load)(CUlibrary *, const void *, CUjit_option *, void **, unsigned int, CUlibraryOption *,
				 void **, unsigned int);
	CUresult (*module_load)(CUmodule *, const void *);
	CUresult (*sync)(void); /* cuCtxSynchronize; NULL: the "sync" step fails */
};

enum app_kind { APP_DEV, APP_HANDLE, APP_ASYNC, APP_ASYNC_PTSZ };

static unsigned long long app_size(const char *s)
{
	char *end;
	unsigned long long n = strtoull(s, &end, 10);

	if (!strcmp(end, "KiB"))
		n <<= 10;
	else if (!strcmp(end, "MiB"))
		n <<= 20;
	else if (!strcmp(end, "GiB"))
		n <<= 30;
	return n;
}

static void app_result(const char *verb, unsigned long long n, CUresult r)
{
	if (r == CUDA_SUCCESS)
		printf("%s %llu ok\n", verb, n);
	else if (r == CUDA_ERROR_OUT_OF_MEMORY)
		printf("%s %llu CUDA_ERROR_OUT_OF_MEMORY\n", verb, n);
	else
		printf("%s %llu rc=%d\n", verb, n, r);
}

static unsigned long long app_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000ull;
}

/* NVML's memory info of its device index (index < 0: device 0, the "nvml" step's line) */
static int app_nvml(int index)
{
	typedef nvmlReturn_t (*init_fn)(void);
	typedef nvmlReturn_t (*handle_fn)(unsigned int, nvmlDevice_t *);
	typedef nvmlReturn_t (*mem_fn)(nvmlDevice_t, nvmlMemory_t *);
	void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
	nvmlDevice_t dev;
	nvmlMemory_t m;
	init_fn init;
	handle_fn get;
	mem_fn mem;

	if (!h) {
		printf("nvml unavailable\n");
		return 1;
	}
	init = (init_fn)dlsym(h, "nvmlInit_v2");
	get = (handle_fn)dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
	mem = (mem_fn)dlsym(h, "nvmlDeviceGetMemoryInfo");
	if (!init || !get || !mem || init() || get(index < 0 ? 0 : (unsigned int)index, &dev) || mem(dev, &m)) {
		printf("nvml failed\n");
		return 1;
	}
	if (index < 0)
		printf("nvml free=%llu total=%llu used=%llu\n", m.free, m.total, m.used);
	else
		printf("nvml dev=%d free=%llu total=%llu used=%llu\n", index, m.free, m.total, m.used);
	return 0;
}

/* Makes device ordinal n's primary context current (the driver's own entry points, not interposed). */
static CUresult app_device(int n)
{
	typedef CUresult (*get_fn)(CUdevice *, int);
	typedef CUresult (*retain_fn)(CUcontext *, CUdevice);
	typedef CUresult (*set_fn)(CUcontext);
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	get_fn get;
	retain_fn retain;
	set_fn set;
	CUdevice dev;
	CUcontext ctx;
	CUresult r;

	if (!h)
		h = dlopen("libcuda.so.1", RTLD_NOW);
	if (!h)
		return CUDA_ERROR_NOT_FOUND;
	get = (get_fn)dlsym(h, "cuDeviceGet");
	retain = (retain_fn)dlsym(h, "cuDevicePrimaryCtxRetain");
	set = (set_fn)dlsym(h, "cuCtxSetCurrent");
	if (!get || !retain || !set)
		return CUDA_ERROR_NOT_FOUND;
	if ((r = get(&dev, n)) != CUDA_SUCCESS || (r = retain(&ctx, dev)) != CUDA_SUCCESS)
		return r;
	return set(ctx);
}

static int app_run(const struct app_api *api, int argc, char **argv)
{
	static unsigned long long keys[4096];
	static enum app_kind kinds[4096];
	int n = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (api->init(0) != CUDA_SUCCESS) {
		printf("init failed\n");
		return 1;
	}
	for (int i = 1; i < argc; i++) {
		const char *v = argv[i];
		const char *a = i + 1 < argc ? argv[i + 1] : "0";
		CUresult r;

		if (!strcmp(v, "alloc") || !strcmp(v, "managed") || !strcmp(v, "create") || !strcmp(v, "async") ||
		    !strcmp(v, "asyncptsz") || !strcmp(v, "pool")) {
			unsigned long long sz = app_size(a), key = 0;
			enum app_kind kind = APP_DEV;

			i++;
			if (!strcmp(v, "alloc"))
				r = api->alloc(&key, sz);
			else if (!strcmp(v, "managed"))
				r = api->managed(&key, sz, 1);
			else if (!strcmp(v, "create"))
				r = api->create(&key, sz, NULL, 0), kind = APP_HANDLE;
			else if (!strcmp(v, "async"))
				r = api->async(&key, sz, NULL), kind = APP_ASYNC;
			else if (!strcmp(v, "asyncptsz"))
				r = api->async_ptsz(&key, sz, NULL), kind = APP_ASYNC_PTSZ;
			else
				r = api->pool(&key, sz, (CUmemoryPool)0x3000, NULL), kind = APP_ASYNC;
			if (r == CUDA_SUCCESS && n < 4096) {
				keys[n] = key;
				kinds[n++] = kind;
			}
			app_result(v, sz, r);
		} else if (!strcmp(v, "pitch") && i + 2 < argc) {
			unsigned long long w = app_size(argv[i + 1]), h = app_size(argv[i + 2]), key = 0;
			size_t pitch = 0;

			i += 2;
			r = api->pitch(&key, &pitch, w, h, 4);
			if (r == CUDA_SUCCESS) {
				keys[n] = key;
				kinds[n++] = APP_DEV;
				printf("pitch %llu %llu ok pitch=%zu\n", w, h, pitch);
			} else {
				printf("pitch %llu %llu %s\n", w, h,
				       r == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY" : "failed");
			}
		} else if (!strcmp(v, "free")) {
			int k = atoi(a);

			i++;
			if (k < 0 || k >= n) {
				printf("free %d no-such-allocation\n", k);
				continue;
			}
			switch (kinds[k]) {
			case APP_HANDLE: r = api->release(keys[k]); break;
			case APP_ASYNC: r = api->free_async(keys[k], NULL); break;
			case APP_ASYNC_PTSZ: r = api->free_async_ptsz(keys[k], NULL); break;
			default: r = api->free_(keys[k]); break;
			}
			printf("free %d %s\n", k, r == CUDA_SUCCESS ? "ok" : "failed");
		} else if (!strcmp(v, "info")) {
			size_t f = 0, t = 0;

			r = api->info(&f, &t);
			printf("info free=%zu total=%zu rc=%d\n", f, t, r);
		} else if (!strcmp(v, "infov1")) {
			unsigned int f = 0, t = 0;

			r = api->info_v1 ? api->info_v1(&f, &t) : CUDA_ERROR_NOT_FOUND;
			printf("infov1 free=%u total=%u rc=%d\n", f, t, r);
		} else if (!strcmp(v, "launch") || !strcmp(v, "launchptsz")) {
			int cnt = atoi(a);
			unsigned long long t0 = app_now_us();

			i++;
			r = CUDA_SUCCESS;
			for (int k = 0; k < cnt && r == CUDA_SUCCESS; k++)
				r = (!strcmp(v, "launch") ? api->launch : api->launch_ptsz)(
					(CUfunction)0x5000, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
			printf("%s %d %s us=%llu\n", v, cnt, r == CUDA_SUCCESS ? "ok" : "failed", app_now_us() - t0);
		} else if (!strcmp(v, "load")) {
			CUlibrary lib;
			CUmodule mod;
			static const unsigned int image[4] = {0x466243b1u, 1, 0, 0};

			r = api->library_load(&lib, image, NULL, NULL, 0, NULL, NULL, 0);
			if (r == CUDA_SUCCESS)
				r = api->module_load(&mod, image);
			printf("load %s\n", r == CUDA_SUCCESS ? "ok" : "failed");
		} else if (!strcmp(v, "nvml")) {
			app_nvml(-1);
		} else if (!strcmp(v, "nvmlidx")) {
			i++;
			app_nvml(atoi(a));
		} else if (!strcmp(v, "device")) {
			i++;
			r = app_device(atoi(a));
			if (r == CUDA_SUCCESS)
				printf("device %s ok\n", a);
			else
				printf("device %s rc=%d\n", a, r);
		} else if (!strcmp(v, "sync")) {
			unsigned long long t0 = app_now_us();

			r = api->sync ? api->sync() : CUDA_ERROR_NOT_FOUND;
			printf("sync %s us=%llu\n", r == CUDA_SUCCESS ? "ok" : "failed", app_now_us() - t0);
		} else if (!strcmp(v, "sleep")) {
			i++;
			usleep((useconds_t)atoi(a) * 1000u);
			printf("sleep %s\n", a);
		} else if (!strcmp(v, "env")) {
			const char *e = getenv(a);

			i++;
			if (e)
				printf("env %s=%s\n", a, e);
			else
				printf("env %s unset\n", a);
		} else if (!strcmp(v, "hold")) {
			printf("hold\n");
			for (;;)
				pause();
		} else {
			printf("unknown step %s\n", v);
			return 2;
		}
	}
	return 0;
}

#endif /* GPUEXT_TESTAPP_STEPS_H */
