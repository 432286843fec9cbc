/*
 * chainlib.c - stands for an LD_PRELOAD library a container already had,
 * placed before the device runtime in LD_PRELOAD. It wraps cuMemAlloc_v2 and
 * forwards with dlsym(RTLD_NEXT) (which must reach the device runtime, so the
 * quota still applies), and checks that dlsym(RTLD_NEXT, "getpid") from it
 * still finds libc's function. It reports on stderr, prefixed "chain ".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cuda_min.h"

__attribute__((visibility("default"))) CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	CUresult (*next)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))dlsym(RTLD_NEXT, "cuMemAlloc_v2");

	fprintf(stderr, "chain cuMemAlloc_v2 size=%zu\n", bytesize);
	return next ? next(dptr, bytesize) : CUDA_ERROR_NOT_INITIALIZED;
}

__attribute__((constructor)) static void chain_init(void)
{
	void *next = dlsym(RTLD_NEXT, "getpid");
	Dl_info di;

	fprintf(stderr, "chain next-getpid %s\n",
		next && dladdr(next, &di) && di.dli_fname && strstr(di.dli_fname, "libc.so") ? "libc" : "wrong");
}
