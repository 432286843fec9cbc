// bt_vectoradd.cu - the kernel most of bpftime's GPU examples attach to,
// vectorAdd(const float *, const float *, float *) (_Z9vectorAddPKfS0_Pf),
// in an app of our own for the gpu-test bpftime group's generic check of
// objects built by hand from bpftime's sources (out/bpftime).
//   bt_vectoradd [BLOCKS] [LAUNCHES]   (256 threads a block)
#include <cstdio>
#include <cstdlib>
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
	for (int l = 0; l < launches; l++)
		vectorAdd<<<blocks, threads>>>(a, b, c);
	cudaError_t err = cudaDeviceSynchronize();
	if (err != cudaSuccess) {
		fprintf(stderr, "kernel failed: %s\n", cudaGetErrorString(err));
		return 1;
	}
	printf("bt_vectoradd_grid blocks=%d threads=%d launches=%d\n", blocks, threads, launches);
	return 0;
}
