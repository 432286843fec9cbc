// vecadd.cu - a vector add and a scale kernel: the smallest app the device
// probe checks splice into (make gpu-test). Prints a checksum of the result
// and the grid it launched, so a probe's block/launch counts can be checked.
//   vecadd [N] [LAUNCHES]
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void vadd(const float *a, const float *b, float *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	c[i] = a[i] + b[i];
}

__global__ void vscale(float *c, float s, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		c[i] *= s;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : (1 << 20);
	int launches = argc > 2 ? atoi(argv[2]) : 10;
	size_t bytes = (size_t)n * sizeof(float);
	float *ha = (float *)malloc(bytes), *hb = (float *)malloc(bytes), *hc = (float *)malloc(bytes);
	float *a, *b, *c;
	for (int i = 0; i < n; i++) {
		ha[i] = (float)(i % 1000) * 0.5f;
		hb[i] = (float)(i % 77);
	}
	if (cudaMalloc(&a, bytes) || cudaMalloc(&b, bytes) || cudaMalloc(&c, bytes)) {
		fprintf(stderr, "cudaMalloc failed\n");
		return 1;
	}
	cudaMemcpy(a, ha, bytes, cudaMemcpyHostToDevice);
	cudaMemcpy(b, hb, bytes, cudaMemcpyHostToDevice);
	int threads = 256, blocks = (n + threads - 1) / threads;
	for (int l = 0; l < launches; l++) {
		vadd<<<blocks, threads>>>(a, b, c, n);
		vscale<<<blocks, threads>>>(c, 0.5f, n);
	}
	cudaError_t err = cudaDeviceSynchronize();
	if (err != cudaSuccess) {
		fprintf(stderr, "kernel failed: %s\n", cudaGetErrorString(err));
		return 1;
	}
	cudaMemcpy(hc, c, bytes, cudaMemcpyDeviceToHost);
	double sum = 0;
	for (int i = 0; i < n; i++)
		sum += hc[i];
	printf("vecadd_checksum %.1f\n", sum);
	printf("vecadd_grid blocks=%d threads=%d launches=%d kernels=%d\n", blocks, threads, launches, 2 * launches);
	return 0;
}
