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
//   apps allocs N           N cudaMalloc(1MiB)+cudaFree pairs, prints the time per pair
//   apps lc N GAP_US        latency-critical requests (8 short kernels + sync), p50/p99 latency
//   apps be SECONDS         best-effort long kernels, kernels per second
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <chrono>
#include <vector>
#include <cuda_runtime.h>
#include <unistd.h>

__global__ void vadd(const float *a, const float *b, float *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		c[i] = a[i] * 2.0f + b[i];
}

__global__ void empty_kernel() {}

// spin keeps every thread busy for about `cycles` SM clock cycles.
__global__ void spin(long long cycles)
{
	long long start = clock64();
	while (clock64() - start < cycles)
		;
}

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

static double now_us()
{
	return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// allocs N: N cudaMalloc(1MiB)+cudaFree pairs, prints the time per pair.
static int allocs(long n)
{
	void *p;
	cudaMalloc(&p, 1 << 20);
	cudaFree(p);
	auto t0 = std::chrono::steady_clock::now();
	for (long i = 0; i < n; i++) {
		cudaMalloc(&p, 1 << 20);
		cudaFree(p);
	}
	double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
	printf("alloc_pair_us %.4f\n", us / n);
	return 0;
}

// lc REQUESTS GAP_US: latency-critical requests, each 8 short dependent
// kernels then a sync; prints p50/p99 request latency.
static int lc(int n, int gap_us)
{
	std::vector<double> lat;
	spin<<<1, 32>>>(1000);
	cudaDeviceSynchronize();
	bool trace = getenv("APPS_LC_TRACE") && *getenv("APPS_LC_TRACE");
	double t_first = now_us();
	for (int i = 0; i < n; i++) {
		double t0 = now_us();
		for (int k = 0; k < 8; k++)
			spin<<<1, 32>>>(20000); /* ~10us each */
		cudaDeviceSynchronize();
		lat.push_back(now_us() - t0);
		if (trace) /* start (CLOCK_MONOTONIC us, the board trace's clock) and latency of each request */
			printf("lc_req %.1f %.1f\n", t0, lat.back());
		usleep(gap_us);
	}
	double t_end = now_us();
	std::sort(lat.begin(), lat.end());
	printf("lc_p50_us %.1f\nlc_p99_us %.1f\n", lat[lat.size() / 2], lat[(size_t)(lat.size() * 0.99)]);
	/* the interval the latency-critical load was active, on the clock the
	 * best-effort ticks use (steady_clock = CLOCK_MONOTONIC, shared by all
	 * processes), so its throughput is measured over exactly this window */
	printf("lc_window_us %.0f %.0f\n", t_first, t_end);
	return 0;
}

// be SECONDS: best-effort work, long kernels over the whole GPU, one in
// flight; prints kernels completed per second.
static int be(double seconds)
{
	int sms = 0;
	cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
	bool trace = getenv("APPS_BE_TRACE") && *getenv("APPS_BE_TRACE");
	double t0 = now_us(), tick = 0;
	long done = 0;
	while (now_us() - t0 < seconds * 1e6) {
		double k0 = now_us();
		spin<<<sms * 2, 512>>>(4000000); /* ~2ms */
		double k1 = now_us();
		cudaDeviceSynchronize();
		done++;
		double t = now_us();
		if (trace) /* launch called, launch returned (past the gate), done: CLOCK_MONOTONIC us */
			printf("be_k %.1f %.1f %.1f\n", k0, k1, t);
		if (t - tick >= 20000) { /* progress ticks: kernels done by time t */
			printf("be_tick %.0f %ld\n", t, done);
			tick = t;
		}
	}
	printf("be_kernels_per_s %.1f\n", done / seconds);
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
	if (!strcmp(argv[1], "allocs"))
		return allocs(argc > 2 ? atol(argv[2]) : 10000);
	if (!strcmp(argv[1], "lc"))
		return lc(argc > 2 ? atoi(argv[2]) : 500, argc > 3 ? atoi(argv[3]) : 5000);
	if (!strcmp(argv[1], "be"))
		return be(argc > 2 ? atof(argv[2]) : 10);
	if (!strcmp(argv[1], "launches"))
		return launches(argc > 2 ? atol(argv[2]) : 100000);
	fprintf(stderr, "unknown mode %s\n", argv[1]);
	return 2;
}
