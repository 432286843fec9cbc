/*
 * app_image.c - a test app that loads CUDA images the way cudart and
 * frameworks do, for the device-probe tests: the driver is found with
 * dlopen("libcuda.so.1") + dlsym("cuGetProcAddress_v2"), every entry point
 * through it. Steps (each prints one line):
 *   lib FILE      cuLibraryLoadData; a fatbin file is wrapped in a
 *                 __fatBinC_Wrapper_t like nvcc's host stub, PTX is passed as
 *                 text, a cubin as is   -> "lib FILE ok" | "lib FILE rc=N"
 *   libraw FILE   the same without the wrapper
 *   mod FILE      cuModuleLoadData     -> "mod FILE ok"
 *   modex FILE    cuModuleLoadDataEx with one JIT option -> "modex FILE ok"
 *   launch N      N x cuLaunchKernel   -> "launch N ok"
 *   launchk I K N N x cuLaunchKernel of the fake driver's kernel K of image I
 *                 (0x50000000 + I * 0x1000 + K * 0x10), grid 4x2x1, block 128 -> "launchk I K N ok"
 *   launchex I K N  the same through cuLaunchKernelEx, grid 3x1x2, block 32x4x1 -> "launchex I K N ok"
 *   coop I K N    the same through cuLaunchCooperativeKernel, grid 2x1x1, block 64x1x1 -> "coop I K N ok"
 *   graph I K M R on a new stream: capture M launches of that kernel, instantiate
 *                 (cuGraphInstantiateWithFlags), replay R times -> "graph I K M R ok" | "... rc=N"
 *   ctx           cuCtxSetCurrent(the context)   -> "ctx ok"
 *   ctx2          cuCtxSetCurrent(a second context, fake driver) -> "ctx2 ok"
 *   ctx2destroy   cuCtxDestroy(the second context, fake driver) -> "ctx2destroy ok"
 *   reset         cuDevicePrimaryCtxReset(device 0)   -> "reset ok"
 *   release7      cuDevicePrimaryCtxRelease(device 0), asked for as CUDA 7
 *                 (the variant before _v2, as a runtime may) -> "release7 ok"
 *   unload        cuLibraryUnload(the last library loaded) -> "unload ok"
 *   sleep MS      -> "sleep MS"
 *   capture MS    on a new stream: cuStreamBeginCapture (global mode), one
 *                 launch into it, MS ms of sleep (the interposer's copy
 *                 thread runs), cuStreamEndCapture -> "capture MS ok" |
 *                 "capture MS rc=N" (fake driver: the launch is f=0x5000)
 * Real driver only (the GPU check; the fake has no device memory):
 *   primary       cuDevicePrimaryCtxRetain(device 0) made current -> "primary ok"
 *   vadd N K      K launches of _Z4vaddPKfS0_Pfi (testdata/fatbin/vecadd_sm90.fatbin:
 *                 c = a + b over N floats) from the last library loaded, through
 *                 cuLibraryGetKernel like cudart, then the result is checked
 *                 -> "vadd N K ok" | "vadd N K mismatch at I" | "vadd ... rc=N"
 * The lines do not depend on whether the images were patched: the
 * application sees no difference.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_min.h"

typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

struct fatbin_wrapper {
	uint32_t magic, version;
	const void *data;
	void *unused;
};

static gpa_fn gpa;

/* entry points only the GPU steps use (NULL in the fake: the step says so) */
static struct {
	CUresult (*device_get)(CUdevice *, int);
	CUresult (*primary_retain)(CUcontext *, CUdevice);
	CUresult (*get_kernel)(CUkernel *, CUlibrary, const char *);
	CUresult (*alloc)(CUdeviceptr *, size_t);
	CUresult (*free_)(CUdeviceptr);
	CUresult (*htod)(CUdeviceptr, const void *, size_t);
	CUresult (*dtoh)(void *, CUdeviceptr, size_t);
	CUresult (*sync)(void);
} gpu;

static void *resolve_at(const char *name, int version)
{
	void *p = NULL;
	CUdriverProcAddressQueryResult st = -1;

	if (gpa(name, &p, version, 0, &st) != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS)
		return NULL;
	return p;
}

static void *resolve(const char *name)
{
	return resolve_at(name, 12080);
}

static unsigned char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf;
	long n;

	if (!f || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
		if (f)
			fclose(f);
		return NULL;
	}
	/* zero-padded: PTX text is NUL-terminated for the driver */
	buf = calloc(1, (size_t)n + 16);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

static const char *base(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

int main(int argc, char **argv)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	CUresult (*init)(unsigned int);
	CUresult (*library_load)(CUlibrary *, const void *, CUjit_option *, void **, unsigned int, CUlibraryOption *,
				 void **, unsigned int);
	CUresult (*module_load)(CUmodule *, const void *);
	CUresult (*module_load_ex)(CUmodule *, const void *, unsigned int, CUjit_option *, void **);
	CUresult (*ctx_set)(CUcontext);
	CUresult (*launch)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
			   unsigned int, unsigned int, CUstream, void **, void **);

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!h || !(gpa = (gpa_fn)dlsym(h, "cuGetProcAddress_v2"))) {
		printf("no driver\n");
		return 1;
	}
	init = (CUresult (*)(unsigned int))resolve("cuInit");
	library_load = (CUresult (*)(CUlibrary *, const void *, CUjit_option *, void **, unsigned int,
				     CUlibraryOption *, void **, unsigned int))resolve("cuLibraryLoadData");
	module_load = (CUresult (*)(CUmodule *, const void *))resolve("cuModuleLoadData");
	module_load_ex = (CUresult (*)(CUmodule *, const void *, unsigned int, CUjit_option *, void **))resolve(
		"cuModuleLoadDataEx");
	ctx_set = (CUresult (*)(CUcontext))resolve("cuCtxSetCurrent");
	launch = (CUresult (*)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
			       unsigned int, unsigned int, CUstream, void **, void **))resolve("cuLaunchKernel");
	gpu.device_get = (CUresult (*)(CUdevice *, int))resolve("cuDeviceGet");
	gpu.primary_retain = (CUresult (*)(CUcontext *, CUdevice))resolve("cuDevicePrimaryCtxRetain");
	gpu.get_kernel = (CUresult (*)(CUkernel *, CUlibrary, const char *))resolve("cuLibraryGetKernel");
	gpu.alloc = (CUresult (*)(CUdeviceptr *, size_t))resolve("cuMemAlloc");
	gpu.free_ = (CUresult (*)(CUdeviceptr))resolve("cuMemFree");
	gpu.htod = (CUresult (*)(CUdeviceptr, const void *, size_t))resolve("cuMemcpyHtoD");
	gpu.dtoh = (CUresult (*)(void *, CUdeviceptr, size_t))resolve("cuMemcpyDtoH");
	gpu.sync = (CUresult (*)(void))resolve("cuCtxSynchronize");
	if (!init || !library_load || !module_load || !module_load_ex || !ctx_set || !launch) {
		printf("lookup failed\n");
		return 1;
	}
	if (init(0) != CUDA_SUCCESS) {
		printf("init failed\n");
		return 1;
	}
	for (int i = 1; i < argc; i++) {
		const char *v = argv[i];
		CUresult r;
		static CUlibrary last_lib;

		if (!strcmp(v, "launchk") && i + 3 < argc) {
			int img = atoi(argv[i + 1]), k = atoi(argv[i + 2]), n = atoi(argv[i + 3]);
			CUfunction f = (CUfunction)(uintptr_t)(0x50000000u + (unsigned)img * 0x1000u + (unsigned)k * 0x10u);

			i += 3;
			r = CUDA_SUCCESS;
			for (int j = 0; j < n && r == CUDA_SUCCESS; j++)
				r = launch(f, 4, 2, 1, 128, 1, 1, 0, NULL, NULL, NULL);
			printf("launchk %d %d %d %s\n", img, k, n, r == CUDA_SUCCESS ? "ok" : "failed");
		} else if ((!strcmp(v, "launchex") || !strcmp(v, "coop")) && i + 3 < argc) {
			int img = atoi(argv[i + 1]), k = atoi(argv[i + 2]), n = atoi(argv[i + 3]);
			CUfunction f = (CUfunction)(uintptr_t)(0x50000000u + (unsigned)img * 0x1000u + (unsigned)k * 0x10u);
			CUresult (*ex)(const void *, CUfunction, void **, void **) =
				(CUresult (*)(const void *, CUfunction, void **, void **))resolve("cuLaunchKernelEx");
			CUresult (*coop)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
					 void **) = (CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
								   unsigned, CUstream, void **))resolve("cuLaunchCooperativeKernel");
			struct {
				unsigned grid[3], block[3], shm;
				CUstream stream;
				void *attrs;
				unsigned nattrs;
			} cfg = {{3, 1, 2}, {32, 4, 1}, 0, NULL, NULL, 0};

			i += 3;
			r = (v[0] == 'l' ? (void *)ex : (void *)coop) ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
			for (int j = 0; j < n && r == CUDA_SUCCESS; j++)
				r = v[0] == 'l' ? ex(&cfg, f, NULL, NULL) : coop(f, 2, 1, 1, 64, 1, 1, 0, NULL, NULL);
			printf("%s %d %d %d %s\n", v, img, k, n, r == CUDA_SUCCESS ? "ok" : "failed");
		} else if (!strcmp(v, "graph") && i + 4 < argc) {
			int img = atoi(argv[i + 1]), k = atoi(argv[i + 2]), m = atoi(argv[i + 3]), reps = atoi(argv[i + 4]);
			CUfunction f = (CUfunction)(uintptr_t)(0x50000000u + (unsigned)img * 0x1000u + (unsigned)k * 0x10u);
			CUresult (*stream_create)(CUstream *, unsigned int) =
				(CUresult (*)(CUstream *, unsigned int))resolve("cuStreamCreate");
			CUresult (*begin)(CUstream, int) = (CUresult (*)(CUstream, int))resolve("cuStreamBeginCapture");
			CUresult (*end)(CUstream, void **) = (CUresult (*)(CUstream, void **))resolve("cuStreamEndCapture");
			CUresult (*inst)(void **, void *, unsigned long long) =
				(CUresult (*)(void **, void *, unsigned long long))resolve("cuGraphInstantiateWithFlags");
			CUresult (*glaunch)(void *, CUstream) = (CUresult (*)(void *, CUstream))resolve("cuGraphLaunch");
			CUstream s = NULL;
			void *graph = NULL, *exec = NULL;

			i += 4;
			r = stream_create && begin && end && inst && glaunch ? stream_create(&s, 1) : CUDA_ERROR_NOT_FOUND;
			if (r == CUDA_SUCCESS)
				r = begin(s, 0);
			for (int j = 0; j < m && r == CUDA_SUCCESS; j++)
				r = launch(f, 8, 1, 1, 64, 1, 1, 0, s, NULL, NULL);
			if (r == CUDA_SUCCESS)
				r = end(s, &graph);
			if (r == CUDA_SUCCESS)
				r = inst(&exec, graph, 0);
			for (int j = 0; j < reps && r == CUDA_SUCCESS; j++)
				r = glaunch(exec, s);
			if (r == CUDA_SUCCESS)
				printf("graph %d %d %d %d ok\n", img, k, m, reps);
			else
				printf("graph %d %d %d %d rc=%d\n", img, k, m, reps, r);
		} else if (!strcmp(v, "launch") && i + 1 < argc) {
			int n = atoi(argv[++i]);

			r = CUDA_SUCCESS;
			for (int k = 0; k < n && r == CUDA_SUCCESS; k++)
				r = launch((CUfunction)0x5000, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
			printf("launch %d %s\n", n, r == CUDA_SUCCESS ? "ok" : "failed");
		} else if (!strcmp(v, "sleep") && i + 1 < argc) {
			int ms = atoi(argv[++i]);
			struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

			nanosleep(&ts, NULL);
			printf("sleep %d\n", ms);
		} else if (!strcmp(v, "capture") && i + 1 < argc) {
			int ms = atoi(argv[++i]);
			struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
			CUresult (*stream_create)(CUstream *, unsigned int) =
				(CUresult (*)(CUstream *, unsigned int))resolve("cuStreamCreate");
			CUresult (*begin)(CUstream, int) = (CUresult (*)(CUstream, int))resolve("cuStreamBeginCapture");
			CUresult (*end)(CUstream, void **) = (CUresult (*)(CUstream, void **))resolve("cuStreamEndCapture");
			CUstream s = NULL;
			void *graph = NULL;

			r = stream_create && begin && end ? stream_create(&s, 1) : CUDA_ERROR_NOT_FOUND;
			if (r == CUDA_SUCCESS)
				r = begin(s, 0); /* CU_STREAM_CAPTURE_MODE_GLOBAL, as PyTorch's graphs */
			if (r == CUDA_SUCCESS)
				r = launch((CUfunction)0x5000, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL);
			nanosleep(&ts, NULL);
			if (r == CUDA_SUCCESS)
				r = end(s, &graph);
			if (r == CUDA_SUCCESS)
				printf("capture %d ok\n", ms);
			else
				printf("capture %d rc=%d\n", ms, r);
		} else if (!strcmp(v, "primary")) {
			CUdevice dev;
			CUcontext ctx;

			r = gpu.device_get && gpu.primary_retain ? gpu.device_get(&dev, 0) : CUDA_ERROR_NOT_FOUND;
			if (r == CUDA_SUCCESS)
				r = gpu.primary_retain(&ctx, dev);
			if (r == CUDA_SUCCESS)
				r = ctx_set(ctx);
			printf("primary %s\n", r == CUDA_SUCCESS ? "ok" : "failed");
		} else if (!strcmp(v, "vadd") && i + 2 < argc) {
			int n = atoi(argv[i + 1]), k = atoi(argv[i + 2]), bad = -1;
			size_t bytes = (size_t)n * sizeof(float);
			float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
			CUdeviceptr da = 0, db = 0, dc = 0;
			CUkernel kern = NULL;
			void *params[4] = {&da, &db, &dc, &n};

			i += 2;
			r = gpu.get_kernel && gpu.alloc && gpu.free_ && gpu.htod && gpu.dtoh && gpu.sync && a && b && c && last_lib
				    ? gpu.get_kernel(&kern, last_lib, "_Z4vaddPKfS0_Pfi")
				    : CUDA_ERROR_NOT_FOUND;
			for (int j = 0; j < n && a && b; j++)
				a[j] = (float)j, b[j] = (float)(2 * j);
			if (r == CUDA_SUCCESS && (r = gpu.alloc(&da, bytes)) == CUDA_SUCCESS && (r = gpu.alloc(&db, bytes)) == CUDA_SUCCESS &&
			    (r = gpu.alloc(&dc, bytes)) == CUDA_SUCCESS && (r = gpu.htod(da, a, bytes)) == CUDA_SUCCESS &&
			    (r = gpu.htod(db, b, bytes)) == CUDA_SUCCESS) {
				for (int j = 0; j < k && r == CUDA_SUCCESS; j++)
					r = launch((CUfunction)kern, (unsigned)(n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL);
				if (r == CUDA_SUCCESS && (r = gpu.sync()) == CUDA_SUCCESS && (r = gpu.dtoh(c, dc, bytes)) == CUDA_SUCCESS)
					for (int j = 0; j < n && bad < 0; j++)
						if (c[j] != (float)(3 * j))
							bad = j;
			}
			if (r != CUDA_SUCCESS)
				printf("vadd %d %d rc=%d\n", n, k, r);
			else if (bad >= 0)
				printf("vadd %d %d mismatch at %d\n", n, k, bad);
			else
				printf("vadd %d %d ok\n", n, k);
			if (da)
				gpu.free_(da);
			if (db)
				gpu.free_(db);
			if (dc)
				gpu.free_(dc);
			free(a);
			free(b);
			free(c);
		} else if (!strcmp(v, "ctx")) {
			r = ctx_set((CUcontext)0x4000);
			printf("ctx %s\n", r == CUDA_SUCCESS ? "ok" : "failed");
		} else if (!strcmp(v, "ctx2")) {
			r = ctx_set((CUcontext)0x4100);
			printf("ctx2 %s\n", r == CUDA_SUCCESS ? "ok" : "failed");
		} else if (!strcmp(v, "unload")) {
			CUresult (*unload)(CUlibrary) = (CUresult (*)(CUlibrary))resolve("cuLibraryUnload");

			r = unload && last_lib ? unload(last_lib) : CUDA_ERROR_NOT_FOUND;
			last_lib = NULL;
			printf("unload %s\n", r == CUDA_SUCCESS ? "ok" : "failed");
		} else if (!strcmp(v, "release7")) {
			CUresult (*release)(CUdevice) = (CUresult (*)(CUdevice))resolve_at("cuDevicePrimaryCtxRelease", 7000);

			r = release ? release(0) : CUDA_ERROR_NOT_FOUND;
			printf("release7 %s\n", r == CUDA_SUCCESS ? "ok" : "failed");
		} else if (!strcmp(v, "ctx2destroy") || !strcmp(v, "reset")) {
			CUresult (*destroy)(CUcontext) = (CUresult (*)(CUcontext))resolve("cuCtxDestroy");
			CUresult (*reset)(CUdevice) = (CUresult (*)(CUdevice))resolve("cuDevicePrimaryCtxReset");

			if (!strcmp(v, "reset"))
				r = reset ? reset(0) : CUDA_ERROR_NOT_FOUND;
			else
				r = destroy ? destroy((CUcontext)0x4100) : CUDA_ERROR_NOT_FOUND;
			printf("%s %s\n", v, r == CUDA_SUCCESS ? "ok" : "failed");
		} else if ((!strcmp(v, "lib") || !strcmp(v, "libraw") || !strcmp(v, "mod") || !strcmp(v, "modex")) &&
			   i + 1 < argc) {
			const char *path = argv[++i];
			unsigned char *img = slurp(path);
			struct fatbin_wrapper w = {0x466243b1u, 1, img, NULL};
			const void *image = img;
			CUlibrary lib;
			CUmodule mod;

			if (!img) {
				printf("%s %s unreadable\n", v, base(path));
				return 1;
			}
			if (!strcmp(v, "lib") && img[0] == 0x50 && img[1] == 0xed && img[2] == 0x55 && img[3] == 0xba)
				image = &w;
			if (!strcmp(v, "lib") || !strcmp(v, "libraw")) {
				r = library_load(&lib, image, NULL, NULL, 0, NULL, NULL, 0);
				if (r == CUDA_SUCCESS)
					last_lib = lib;
			} else if (!strcmp(v, "mod")) {
				r = module_load(&mod, image);
			} else {
				CUjit_option o[1] = {0}; /* CU_JIT_MAX_REGISTERS */
				void *ov[1] = {(void *)(uintptr_t)64};

				r = module_load_ex(&mod, image, 1, o, ov);
			}
			if (r == CUDA_SUCCESS)
				printf("%s %s ok\n", v, base(path));
			else
				printf("%s %s rc=%d\n", v, base(path), r);
			/* the image stays: the driver may keep pointing into it */
		} else {
			printf("unknown step %s\n", v);
			return 2;
		}
	}
	return 0;
}
