/*
 * kernel_cost.c - the GPU time of one kernel of an operator's image, plain
 * and as each probe set's splice leaves it, side by side in one process
 * (make gpu-test section probe-app, GPUEXT_APP_PTX).
 *
 * A whole-workload rate (llama.cpp's prefill tokens/s) moves by a third
 * from one process to the next on the H200 (docs/device-probes.md, ninth
 * session), so it cannot show what a probe on one kernel costs. This times
 * the kernel itself: each PTX file is JIT-loaded with cuModuleLoadData, as
 * the interposer loads a patched image, and KERNEL is launched from a CUDA
 * graph of LAUNCHES launches, the files' graphs rotated over ROUNDS rounds.
 *
 *   kernel_cost ROUNDS LAUNCHES KERNEL GRID BLOCK ARGS PLAIN.ptx [SPLICED.ptx ...]
 *
 * GRID and BLOCK are X[xY[xZ]]. ARGS is the kernel's parameters in order,
 * comma-separated: bN (a device buffer of N bytes, zeroed), i32:V, i64:V,
 * f32:V. Prints, per file, "INFO kernel_cost file=NAME median_us=M
 * min_us=A max_us=B ratio=R added_us=D" (ratio and added time against the
 * first file), or "FAIL kernel_cost: ..." and exits 1.
 *
 * Then the host path of a launch time (probe_launch.c: before each launch
 * of a probed image with launch times, the interposer writes the time with
 * cuStreamWriteValue64 on the launch's stream, once for the image and once
 * per hostWrite): the plain kernel launched LAUNCHES times on a stream,
 * without graphs, then the same launches each preceded by 1 and by 2 such
 * writes (the _v2 call takes no flag but 0 on the H200's driver), rotated
 * over ROUNDS rounds: "INFO kernel_cost stream=NAME writes=W median_us=M
 * min_us=A max_us=B host_us=H added_us=D" (GPU time per launch from events; host_us
 * the launching thread's time per launch; added_us against stream=launch).
 *
 * Needs only libcuda (dlopen), so it builds with gcc:
 * gcc -O2 -I devrt/lib -o kernel_cost test/gpu/kernel_cost.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_min.h"
#include "read_file.h"

#define MAX_FILES 16
#define MAX_ARGS 32
#define CU_STREAM_CAPTURE_MODE_THREAD_LOCAL 1

/* the driver entry points used, resolved from libcuda.so.1 by name */
static struct {
	CUresult (*cuInit)(unsigned int);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*cuCtxSetCurrent)(CUcontext);
	CUresult (*cuModuleLoadData)(CUmodule *, const void *);
	CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
	CUresult (*cuMemAlloc_v2)(CUdeviceptr *, size_t);
	CUresult (*cuMemsetD8_v2)(CUdeviceptr, unsigned char, size_t);
	CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
				   void **, void **);
	CUresult (*cuStreamCreate)(CUstream *, unsigned int);
	CUresult (*cuStreamBeginCapture_v2)(CUstream, int);
	CUresult (*cuStreamEndCapture)(CUstream, CUgraph *);
	CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
	CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
	CUresult (*cuEventCreate)(CUevent *, unsigned int);
	CUresult (*cuEventRecord)(CUevent, CUstream);
	CUresult (*cuEventSynchronize)(CUevent);
	CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
	CUresult (*cuCtxSynchronize)(void);
	CUresult (*cuStreamWriteValue64_v2)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
	CUresult (*cuGetErrorString)(CUresult, const char **);
} cu;

static int fail(const char *what, CUresult r)
{
	const char *es = "?";

	if (cu.cuGetErrorString)
		cu.cuGetErrorString(r, &es);
	printf("FAIL kernel_cost: %s: %s (CUresult %d)\n", what, es, r);
	return 1;
}

#define CHECK(call, what)                                                                                                  \
	do {                                                                                                               \
		CUresult r_ = (call);                                                                                      \
		if (r_ != CUDA_SUCCESS)                                                                                    \
			return fail(what, r_);                                                                             \
	} while (0)

static int resolve(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	struct {
		const char *name;
		void **slot;
	} t[] = {
#define SYM(n) {#n, (void **)&cu.n}
		SYM(cuInit), SYM(cuDeviceGet), SYM(cuDevicePrimaryCtxRetain), SYM(cuCtxSetCurrent), SYM(cuModuleLoadData),
		SYM(cuModuleGetFunction), SYM(cuMemAlloc_v2), SYM(cuMemsetD8_v2), SYM(cuLaunchKernel), SYM(cuStreamCreate),
		SYM(cuStreamBeginCapture_v2), SYM(cuStreamEndCapture), SYM(cuGraphInstantiateWithFlags), SYM(cuGraphLaunch),
		SYM(cuEventCreate), SYM(cuEventRecord), SYM(cuEventSynchronize), SYM(cuEventElapsedTime), SYM(cuCtxSynchronize),
		SYM(cuStreamWriteValue64_v2), SYM(cuGetErrorString),
#undef SYM
	};

	if (!h) {
		printf("FAIL kernel_cost: dlopen libcuda.so.1: %s\n", dlerror());
		return 1;
	}
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (!(*t[i].slot = dlsym(h, t[i].name)) && t[i].slot != (void **)&cu.cuGetErrorString &&
		    t[i].slot != (void **)&cu.cuMemsetD8_v2) { /* those two only make messages and inputs nicer */
			printf("FAIL kernel_cost: libcuda has no %s\n", t[i].name);
			return 1;
		}
	return 0;
}

/* "X[xY[xZ]]" into d[3]; 0 when malformed or a dimension is 0 */
static int parse_dim(const char *s, unsigned d[3])
{
	char *end;

	d[0] = d[1] = d[2] = 1;
	for (int i = 0; i < 3; i++) {
		unsigned long v = strtoul(s, &end, 10);

		if (end == s || v == 0 || v > 0x7fffffffUL)
			return 0;
		d[i] = (unsigned)v;
		if (!*end)
			return 1;
		if (*end != 'x')
			return 0;
		s = end + 1;
	}
	return 0;
}

/* the kernel's parameters: storage for each value, and the pointer array cuLaunchKernel takes */
struct args {
	int n;
	union {
		CUdeviceptr p;
		int i32;
		long long i64;
		float f32;
	} v[MAX_ARGS];
	void *ptr[MAX_ARGS];
};

static int parse_args(char *spec, struct args *a)
{
	a->n = 0;
	for (char *save = NULL, *tok = strtok_r(spec, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *end;
		int k = a->n;

		if (k == MAX_ARGS) {
			printf("FAIL kernel_cost: more than %d arguments\n", MAX_ARGS);
			return 1;
		}
		if (tok[0] == 'b') {
			unsigned long long bytes = strtoull(tok + 1, &end, 10);

			if (end == tok + 1 || *end || !bytes) {
				printf("FAIL kernel_cost: argument %d \"%s\": want bN, N bytes > 0\n", k + 1, tok);
				return 1;
			}
			CHECK(cu.cuMemAlloc_v2(&a->v[k].p, bytes), "cuMemAlloc");
			if (cu.cuMemsetD8_v2)
				CHECK(cu.cuMemsetD8_v2(a->v[k].p, 0, bytes), "cuMemsetD8");
		} else if (!strncmp(tok, "i32:", 4)) {
			a->v[k].i32 = (int)strtol(tok + 4, &end, 0);
		} else if (!strncmp(tok, "i64:", 4)) {
			a->v[k].i64 = strtoll(tok + 4, &end, 0);
		} else if (!strncmp(tok, "f32:", 4)) {
			a->v[k].f32 = strtof(tok + 4, &end);
		} else {
			end = tok;
		}
		if (tok[0] != 'b' && (end == tok + 4 || *end)) {
			printf("FAIL kernel_cost: argument %d \"%s\": want bN, i32:V, i64:V or f32:V\n", k + 1, tok);
			return 1;
		}
		a->ptr[k] = &a->v[k];
		a->n++;
	}
	return 0;
}

static int cmp_float(const void *x, const void *y)
{
	float a = *(const float *)x, b = *(const float *)y;

	return (a > b) - (a < b);
}

/* sorts v[0..n) and returns its median (v[0] and v[n-1] are then the range) */
static float sorted_median(float *v, int n)
{
	qsort(v, n, sizeof(float), cmp_float);
	return v[n / 2];
}

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/*
 * The launch-time writes' cost on the launch path (the header): plain
 * stream launches against launches preceded by W writes of the host's
 * time, in one rotation.
 */
static int stream_writes(int rounds, int launches, const char *kernel, CUfunction fn, const unsigned grid[3],
			 const unsigned block[3], struct args *a, CUstream st, CUevent e0, CUevent e1)
{
	static const struct {
		const char *name;
		int writes;
	} v[] = {
		{"launch", 0},
		{"write", 1},
		{"write", 2},
	};
	enum { NV = sizeof(v) / sizeof(v[0]) };
	static float us[NV][1000], host[NV][1000];
	CUdeviceptr slot;
	float base = 0;

	CHECK(cu.cuMemAlloc_v2(&slot, 16), "cuMemAlloc (launch-time slots)");
	for (int r = 0; r < rounds; r++)
		for (int k = 0; k < NV; k++) {
			int j = (k + r) % NV;
			float ms = 0;
			double h0;

			CHECK(cu.cuCtxSynchronize(), "stream round");
			h0 = now_us();
			CHECK(cu.cuEventRecord(e0, st), "cuEventRecord");
			for (int i = 0; i < launches; i++) {
				for (int w = 0; w < v[j].writes; w++)
					CHECK(cu.cuStreamWriteValue64_v2(st, slot + 8 * w, (cuuint64_t)i, 0),
					      "cuStreamWriteValue64");
				CHECK(cu.cuLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0, st, a->ptr,
							NULL),
				      "cuLaunchKernel (stream)");
			}
			CHECK(cu.cuEventRecord(e1, st), "cuEventRecord");
			host[j][r] = (float)((now_us() - h0) / launches);
			CHECK(cu.cuEventSynchronize(e1), "cuEventSynchronize");
			CHECK(cu.cuEventElapsedTime(&ms, e0, e1), "cuEventElapsedTime");
			us[j][r] = ms * 1000.f / launches;
		}
	for (int j = 0; j < NV; j++) {
		float med;

		med = sorted_median(us[j], rounds);
		if (j == 0)
			base = med;
		printf("INFO kernel_cost stream=%s writes=%d kernel=%s median_us=%.3f min_us=%.3f max_us=%.3f "
		       "host_us=%.3f added_us=%.3f\n",
		       v[j].name, v[j].writes, kernel, med, us[j][0], us[j][rounds - 1], sorted_median(host[j], rounds),
		       med - base);
	}
	return 0;
}

int main(int argc, char **argv)
{
	unsigned grid[3], block[3];
	int rounds, launches, nf = argc - 7;
	CUmodule mod[MAX_FILES];
	CUfunction fn[MAX_FILES];
	CUgraphExec ge[MAX_FILES];
	static float us[MAX_FILES][1000];
	struct args a;
	CUdevice dev;
	CUcontext ctx;
	CUstream st;
	CUevent e0, e1;

	if (argc < 8 || nf > MAX_FILES || (rounds = atoi(argv[1])) < 1 || rounds > 1000 || (launches = atoi(argv[2])) < 1 ||
	    !parse_dim(argv[4], grid) || !parse_dim(argv[5], block)) {
		fprintf(stderr, "usage: %s ROUNDS(1-1000) LAUNCHES KERNEL GRID BLOCK ARGS PLAIN.ptx [SPLICED.ptx ...] (at most %d files)\n",
			argv[0], MAX_FILES);
		return 2;
	}
	if (resolve())
		return 1;
	CHECK(cu.cuInit(0), "cuInit");
	CHECK(cu.cuDeviceGet(&dev, 0), "cuDeviceGet");
	CHECK(cu.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	CHECK(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
	if (parse_args(argv[6], &a))
		return 1;
	CHECK(cu.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
	CHECK(cu.cuEventCreate(&e0, 0), "cuEventCreate");
	CHECK(cu.cuEventCreate(&e1, 0), "cuEventCreate");
	for (int f = 0; f < nf; f++) {
		char *text = read_file(argv[7 + f], NULL);
		CUgraph g;

		if (!text) {
			printf("FAIL kernel_cost: %s: cannot read\n", argv[7 + f]);
			return 1;
		}
		CHECK(cu.cuModuleLoadData(&mod[f], text), argv[7 + f]);
		free(text);
		CHECK(cu.cuModuleGetFunction(&fn[f], mod[f], argv[3]), argv[3]);
		/* once outside the graph: a launch error shows here, not as a wrong time */
		CHECK(cu.cuLaunchKernel(fn[f], grid[0], grid[1], grid[2], block[0], block[1], block[2], 0, st, a.ptr, NULL),
		      "cuLaunchKernel");
		CHECK(cu.cuCtxSynchronize(), "the first launch");
		CHECK(cu.cuStreamBeginCapture_v2(st, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
		for (int i = 0; i < launches; i++)
			CHECK(cu.cuLaunchKernel(fn[f], grid[0], grid[1], grid[2], block[0], block[1], block[2], 0, st, a.ptr, NULL),
			      "cuLaunchKernel (capture)");
		CHECK(cu.cuStreamEndCapture(st, &g), "cuStreamEndCapture");
		CHECK(cu.cuGraphInstantiateWithFlags(&ge[f], g, 0), "cuGraphInstantiate");
	}
	for (int f = 0; f < nf; f++) /* clocks up, every graph run once */
		CHECK(cu.cuGraphLaunch(ge[f], st), "cuGraphLaunch");
	CHECK(cu.cuCtxSynchronize(), "warm-up");
	for (int r = 0; r < rounds; r++)
		for (int k = 0; k < nf; k++) {
			int f = (k + r) % nf; /* rotate the order */
			float ms = 0;

			CHECK(cu.cuEventRecord(e0, st), "cuEventRecord");
			CHECK(cu.cuGraphLaunch(ge[f], st), "cuGraphLaunch");
			CHECK(cu.cuEventRecord(e1, st), "cuEventRecord");
			CHECK(cu.cuEventSynchronize(e1), "cuEventSynchronize");
			CHECK(cu.cuEventElapsedTime(&ms, e0, e1), "cuEventElapsedTime");
			us[f][r] = ms * 1000.f / launches;
		}
	float base = 0;

	for (int f = 0; f < nf; f++) {
		const char *name = strrchr(argv[7 + f], '/');
		float med;

		med = sorted_median(us[f], rounds);
		if (f == 0)
			base = med;
		printf("INFO kernel_cost file=%s kernel=%s median_us=%.3f min_us=%.3f max_us=%.3f ratio=%.4f added_us=%.3f\n",
		       name ? name + 1 : argv[7 + f], argv[3], med, us[f][0], us[f][rounds - 1], base > 0 ? med / base : 0.0,
		       med - base);
	}
	return stream_writes(rounds, launches, argv[3], fn[0], grid, block, &a, st, e0, e1);
}
