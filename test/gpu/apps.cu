// apps.cu - CUDA programs for the H200 checks of the device runtime
// (test/gpu/gpu-test.sh). One source, built several ways (static and shared
// cudart, per-thread default stream). Each mode prints result lines that the
// script compares with and without the interposer loaded.
//
//   apps compute            vector add + reduction, prints a checksum
//   apps graph              the same through a captured CUDA graph
//   apps alloc BYTES... [hold]  cudaMalloc each size in turn, prints ok/oom and cudaMemGetInfo;
//                           with hold, keeps the memory until killed
//   apps launches N         N empty-kernel launches, prints the time per launch
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <cuda_runtime.h>
#include <unistd.h>

__global__ void vadd(const float *a, const float *b, float *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		c[i] = a[i] * 2.0f + b[i];
}

__global__ void empty_kernel() {}

static int check(cudaError_t e, const char *what)
{
	if (e != cudaSuccess) {
		printf("%s error %s\n", what, cudaGetErrorName(e));
		return 1;
	}
	return 0;
}

static double checksum(const float *h, int n)
{
	double s = 0;
	for (int i = 0; i < n; i++)
		s += h[i] * ((i % 7) + 1);
	return s;
}

static int compute(bool graph)
{
	const int n = 1 << 24;
	size_t bytes = n * sizeof(float);
	float *ha = (float *)malloc(bytes), *hb = (float *)malloc(bytes), *hc = (float *)malloc(bytes);
	for (int i = 0; i < n; i++) {
		ha[i] = (float)(i % 1000) / 7.0f;
		hb[i] = (float)(i % 313) / 3.0f;
	}
	float *a, *b, *c;
	if (check(cudaMalloc(&a, bytes), "cudaMalloc") || check(cudaMalloc(&b, bytes), "cudaMalloc") ||
	    check(cudaMalloc(&c, bytes), "cudaMalloc"))
		return 1;
	cudaMemcpy(a, ha, bytes, cudaMemcpyHostToDevice);
	cudaMemcpy(b, hb, bytes, cudaMemcpyHostToDevice);
	if (graph) {
		cudaStream_t s;
		cudaGraph_t g;
		cudaGraphExec_t ge;
		cudaStreamCreate(&s);
		cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
		vadd<<<(n + 255) / 256, 256, 0, s>>>(a, b, c, n);
		vadd<<<(n + 255) / 256, 256, 0, s>>>(c, b, c, n);
		cudaStreamEndCapture(s, &g);
		if (check(cudaGraphInstantiate(&ge, g, 0), "cudaGraphInstantiate"))
			return 1;
		cudaGraphLaunch(ge, s);
		cudaStreamSynchronize(s);
	} else {
		vadd<<<(n + 255) / 256, 256>>>(a, b, c, n);
		vadd<<<(n + 255) / 256, 256>>>(c, b, c, n);
	}
	if (check(cudaDeviceSynchronize(), "sync"))
		return 1;
	cudaMemcpy(hc, c, bytes, cudaMemcpyDeviceToHost);
	printf("checksum %.6e\n", checksum(hc, n));
	cudaFree(a);
	cudaFree(b);
	cudaFree(c);
	return 0;
}

static int alloc(int argc, char **argv)
{
	bool hold = argc > 0 && !strcmp(argv[argc - 1], "hold");
	if (hold)
		argc--;
	for (int i = 0; i < argc; i++) {
		size_t sz = strtoull(argv[i], NULL, 10);
		void *p = NULL;
		cudaError_t e = cudaMalloc(&p, sz);
		printf("alloc %zu %s\n", sz, e == cudaSuccess ? "ok" : (e == cudaErrorMemoryAllocation ? "oom" : cudaGetErrorName(e)));
		if (e != cudaSuccess)
			cudaGetLastError();
	}
	size_t fr = 0, tot = 0;
	cudaMemGetInfo(&fr, &tot);
	printf("meminfo free=%zu total=%zu\n", fr, tot);
	fflush(stdout);
	while (hold)
		pause(); /* keep the memory until killed */
	return 0;
}

static int launches(long n)
{
	empty_kernel<<<1, 1>>>();
	cudaDeviceSynchronize();
	auto t0 = std::chrono::steady_clock::now();
	for (long i = 0; i < n; i++)
		empty_kernel<<<1, 1>>>();
	cudaDeviceSynchronize();
	double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
	printf("launch_us %.4f\n", us / n);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: apps compute|graph|alloc BYTES...|launches N\n");
		return 2;
	}
	if (!strcmp(argv[1], "compute"))
		return compute(false);
	if (!strcmp(argv[1], "graph"))
		return compute(true);
	if (!strcmp(argv[1], "alloc"))
		return alloc(argc - 2, argv + 2);
	if (!strcmp(argv[1], "launches"))
		return launches(argc > 2 ? atol(argv[2]) : 100000);
	fprintf(stderr, "unknown mode %s\n", argv[1]);
	return 2;
}
