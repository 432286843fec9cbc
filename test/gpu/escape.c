/*
 * escape.c - a tenant process that tries to take more GPU memory than its
 * quota through the CUDA driver API itself (make gpu-test section memguard).
 *
 *   escape [--lib PATH] STEP...
 *     --lib PATH    load the driver from PATH (a copy of libcuda.so.1 at
 *                   another path) and call it through dlsym; otherwise the
 *                   program is linked against libcuda (-lcuda) directly
 *     alloc BYTES   cuMemAlloc_v2         -> "alloc BYTES ok|oom|rc=N"
 *     create BYTES  cuMemCreate (VMM, pinned device memory), then
 *                   cuMemAddressReserve + cuMemMap + cuMemSetAccess
 *                                         -> "create BYTES ok|oom|rc=N"
 *     hold          print "hold", keep everything until killed
 * Each line is flushed, so a reader can time the step that went over.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static CUresult (*p_init)(unsigned int);
static CUresult (*p_dev_get)(CUdevice *, int);
static CUresult (*p_primary_retain)(CUcontext *, CUdevice);
static CUresult (*p_ctx_set)(CUcontext);
static CUresult (*p_alloc)(CUdeviceptr *, size_t);
static CUresult (*p_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
static CUresult (*p_granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
static CUresult (*p_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
static CUresult (*p_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
static CUresult (*p_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);

static void load(const char *path)
{
	if (!path) {
		p_init = cuInit;
		p_dev_get = cuDeviceGet;
		p_primary_retain = cuDevicePrimaryCtxRetain;
		p_ctx_set = cuCtxSetCurrent;
		p_alloc = cuMemAlloc_v2;
		p_create = cuMemCreate;
		p_granularity = cuMemGetAllocationGranularity;
		p_reserve = cuMemAddressReserve;
		p_map = cuMemMap;
		p_access = cuMemSetAccess;
		return;
	}
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
		exit(2);
	}
#define SYM(var, name)                                                      \
	do {                                                                \
		*(void **)&var = dlsym(h, name);                            \
		if (!var) {                                                 \
			fprintf(stderr, "dlsym %s: %s\n", name, dlerror()); \
			exit(2);                                            \
		}                                                           \
	} while (0)
	SYM(p_init, "cuInit");
	SYM(p_dev_get, "cuDeviceGet");
	SYM(p_primary_retain, "cuDevicePrimaryCtxRetain");
	SYM(p_ctx_set, "cuCtxSetCurrent");
	SYM(p_alloc, "cuMemAlloc_v2");
	SYM(p_create, "cuMemCreate");
	SYM(p_granularity, "cuMemGetAllocationGranularity");
	SYM(p_reserve, "cuMemAddressReserve");
	SYM(p_map, "cuMemMap");
	SYM(p_access, "cuMemSetAccess");
}

static void said(const char *verb, size_t n, CUresult r)
{
	if (r == CUDA_SUCCESS)
		printf("%s %zu ok\n", verb, n);
	else if (r == CUDA_ERROR_OUT_OF_MEMORY)
		printf("%s %zu oom\n", verb, n);
	else
		printf("%s %zu rc=%d\n", verb, n, (int)r);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	const char *lib = NULL;
	CUdevice dev;
	CUcontext ctx;
	int i = 1;

	if (argc > 2 && !strcmp(argv[1], "--lib")) {
		lib = argv[2];
		i = 3;
	}
	load(lib);
	if (p_init(0) || p_dev_get(&dev, 0) || p_primary_retain(&ctx, dev) || p_ctx_set(ctx)) {
		fprintf(stderr, "no CUDA context\n");
		return 2;
	}
	for (; i < argc; i++) {
		if (!strcmp(argv[i], "hold")) {
			printf("hold\n");
			fflush(stdout);
			for (;;)
				pause();
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "%s: needs BYTES\n", argv[i]);
			return 2;
		}
		size_t n = strtoull(argv[i + 1], NULL, 10);
		if (!strcmp(argv[i], "alloc")) {
			CUdeviceptr p;
			said("alloc", n, p_alloc(&p, n));
		} else if (!strcmp(argv[i], "create")) {
			CUmemAllocationProp prop = {0};
			CUmemGenericAllocationHandle hd;
			CUmemAccessDesc acc = {0};
			CUdeviceptr va;
			size_t g = 0;
			CUresult r;

			prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
			prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
			prop.location.id = 0;
			p_granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
			if (g)
				n = (n + g - 1) / g * g;
			r = p_create(&hd, n, &prop, 0);
			if (r == CUDA_SUCCESS)
				r = p_reserve(&va, n, 0, 0, 0);
			if (r == CUDA_SUCCESS)
				r = p_map(va, n, 0, hd, 0);
			if (r == CUDA_SUCCESS) {
				acc.location = prop.location;
				acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
				r = p_access(va, n, &acc, 1);
			}
			said("create", n, r);
		} else {
			fprintf(stderr, "unknown step %s\n", argv[i]);
			return 2;
		}
		i++;
	}
	return 0;
}
