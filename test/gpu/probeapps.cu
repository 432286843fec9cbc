// probeapps.cu - apps for the device-probe checks and benchmarks (make gpu-test).
//   probeapps sgemm N REPS      tiled SGEMM C = A x B (N x N), REPS launches; prints
//                               a checksum and the grid it launched
//   probeapps bench small ITERS mean time of a ~5 us kernel over ITERS launches
//                               (a CUDA graph of 1000 launches, replayed)
//   probeapps bench gemm N ITERS mean time of an N x N SGEMM over ITERS launches
// Times come from CUDA events around the whole batch (one sync), so the
// figure is GPU time per kernel, launch overhead hidden behind the queue.
// Before the batch the kernel runs for at least 300 ms, so the GPU's clocks
// have left their idle state whichever process runs first.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>
#include <cuda_runtime.h>

#define TILE 32

__global__ void sgemm(const float *A, const float *B, float *C, int n)
{
	__shared__ float as[TILE][TILE], bs[TILE][TILE];
	int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
	float acc = 0.f;
	for (int t = 0; t < n; t += TILE) {
		as[threadIdx.y][threadIdx.x] = (row < n && t + threadIdx.x < n) ? A[row * n + t + threadIdx.x] : 0.f;
		bs[threadIdx.y][threadIdx.x] = (col < n && t + threadIdx.y < n) ? B[(t + threadIdx.y) * n + col] : 0.f;
		__syncthreads();
#pragma unroll
		for (int k = 0; k < TILE; k++)
			acc += as[threadIdx.y][k] * bs[k][threadIdx.x];
		__syncthreads();
	}
	if (row < n && col < n)
		C[row * n + col] = acc;
}

__global__ void small_kernel(float *x, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] = x[i] * 1.0001f + 0.5f;
}

static int check(cudaError_t e, const char *what)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
		exit(1);
	}
	return 0;
}

static void fill(std::vector<float> &v, int seed)
{
	for (size_t i = 0; i < v.size(); i++)
		v[i] = (float)((i * 7 + seed) % 13) * 0.25f - 1.f;
}

static float *upload(const std::vector<float> &v)
{
	float *d;
	check(cudaMalloc(&d, v.size() * sizeof(float)), "cudaMalloc");
	check(cudaMemcpy(d, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice), "copy");
	return d;
}

static int run_sgemm(int n, int reps)
{
	std::vector<float> a((size_t)n * n), b((size_t)n * n), c((size_t)n * n);
	fill(a, 1);
	fill(b, 5);
	float *da = upload(a), *db = upload(b), *dc;
	check(cudaMalloc(&dc, c.size() * sizeof(float)), "cudaMalloc");
	dim3 blk(TILE, TILE), grid((n + TILE - 1) / TILE, (n + TILE - 1) / TILE);
	for (int r = 0; r < reps; r++)
		sgemm<<<grid, blk>>>(da, db, dc, n);
	check(cudaDeviceSynchronize(), "sgemm");
	check(cudaMemcpy(c.data(), dc, c.size() * sizeof(float), cudaMemcpyDeviceToHost), "copy back");
	double sum = 0;
	for (float x : c)
		sum += x;
	printf("sgemm_checksum %.3f\n", sum);
	printf("sgemm_grid blocks=%d threads=%d launches=%d\n", grid.x * grid.y, TILE * TILE, reps);
	return 0;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int bench(const char *what, int n, int iters)
{
	cudaEvent_t e0, e1;
	float ms = 0;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	if (!strcmp(what, "small")) {
		int len = 1 << 20; /* 4 MiB in and out: ~5 us on an H200 */
		std::vector<float> h(len);
		fill(h, 3);
		float *d = upload(h);
		/*
		 * One graph of 1000 launches, replayed: the GPU runs the kernels
		 * back to back whatever the host's launch rate (launched one by
		 * one, a ~5 us kernel is as fast as the host can submit, and the
		 * interposer's hooks would be timed with the probes).
		 */
		cudaStream_t s;
		cudaGraph_t g;
		cudaGraphExec_t ge;
		check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
		small_kernel<<<len / 256, 256, 0, s>>>(d, len); /* module load (and the interposer's bind) before the capture */
		check(cudaStreamSynchronize(s), "first launch");
		check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
		for (int i = 0; i < 1000; i++)
			small_kernel<<<len / 256, 256, 0, s>>>(d, len);
		check(cudaStreamEndCapture(s, &g), "capture");
		check(cudaGraphInstantiate(&ge, g, 0), "instantiate");
		for (double t0 = now_s(); now_s() - t0 < 0.3;) {
			check(cudaGraphLaunch(ge, s), "warmup");
			check(cudaStreamSynchronize(s), "warmup");
		}
		iters = (iters + 999) / 1000 * 1000;
		cudaEventRecord(e0, s);
		for (int i = 0; i < iters / 1000; i++)
			check(cudaGraphLaunch(ge, s), "graph");
		cudaEventRecord(e1, s);
	} else {
		std::vector<float> a((size_t)n * n);
		fill(a, 2);
		float *da = upload(a), *dc;
		check(cudaMalloc(&dc, a.size() * sizeof(float)), "cudaMalloc");
		dim3 blk(TILE, TILE), grid((n + TILE - 1) / TILE, (n + TILE - 1) / TILE);
		for (double t0 = now_s(); now_s() - t0 < 0.3;) {
			sgemm<<<grid, blk>>>(da, da, dc, n);
			check(cudaDeviceSynchronize(), "warmup");
		}
		cudaEventRecord(e0);
		for (int i = 0; i < iters; i++)
			sgemm<<<grid, blk>>>(da, da, dc, n);
		cudaEventRecord(e1);
	}
	check(cudaEventSynchronize(e1), "bench");
	cudaEventElapsedTime(&ms, e0, e1);
	printf("kernel_us %.3f\n", ms * 1000.f / iters);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 4 && !strcmp(argv[1], "sgemm"))
		return run_sgemm(atoi(argv[2]), atoi(argv[3]));
	if (argc >= 4 && !strcmp(argv[1], "bench") && !strcmp(argv[2], "small"))
		return bench("small", 0, atoi(argv[3]));
	if (argc >= 5 && !strcmp(argv[1], "bench") && !strcmp(argv[2], "gemm"))
		return bench("gemm", atoi(argv[3]), atoi(argv[4]));
	fprintf(stderr, "usage: probeapps sgemm N REPS | bench small ITERS | bench gemm N ITERS\n");
	return 2;
}
