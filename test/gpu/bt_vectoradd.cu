// bt_vectoradd.cu - the kernel most of bpftime's GPU examples attach to,
// vectorAdd(const float *, const float *, float *) (_Z9vectorAddPKfS0_Pf),
// in an app of our own for the gpu-test bpftime group's generic check of
// objects built by hand from bpftime's sources (out/bpftime).
// With "rate" it is also gpu-test's default probe-app workload: after a
// warm-up launch it times LAUNCHES launches and prints launches per second
// as its last line.
//   bt_vectoradd [BLOCKS] [LAUNCHES] [rate]   (256 threads a block)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

__global__ void vectorAdd(const float *a, const float *b, float *c)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	c[i] = a[i] + b[i];
}

int main(int argc, char **argv)
{
	int blocks = argc > 1 ? atoi(argv[1]) : 64;
	int launches = argc > 2 ? atoi(argv[2]) : 10;
	int threads = 256, n = blocks * threads;
	float *a, *b, *c;
	if (cudaMalloc(&a, n * sizeof(float)) || cudaMalloc(&b, n * sizeof(float)) || cudaMalloc(&c, n * sizeof(float))) {
		fprintf(stderr, "cudaMalloc failed\n");
		return 1;
	}
	cudaMemset(a, 0, n * sizeof(float));
	cudaMemset(b, 0, n * sizeof(float));
	int rate = argc > 3 && !strcmp(argv[3], "rate");
	cudaEvent_t t0, t1;
	if (rate) {
		vectorAdd<<<blocks, threads>>>(a, b, c);
		cudaEventCreate(&t0);
		cudaEventCreate(&t1);
		cudaEventRecord(t0);
	}
	for (int l = 0; l < launches; l++)
		vectorAdd<<<blocks, threads>>>(a, b, c);
	float ms = 0;
	if (rate) {
		cudaEventRecord(t1);
		cudaEventSynchronize(t1);
		cudaEventElapsedTime(&ms, t0, t1);
	}
	cudaError_t err = cudaDeviceSynchronize();
	if (err != cudaSuccess) {
		fprintf(stderr, "kernel failed: %s\n", cudaGetErrorString(err));
		return 1;
	}
	printf("bt_vectoradd_grid blocks=%d threads=%d launches=%d\n", blocks, threads, launches);
	if (rate)
		printf("%.1f\n", ms > 0 ? launches * 1000.0 / ms : 0.0);
	return 0;
}
