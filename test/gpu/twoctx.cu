// twoctx.cu - one kernel image run in two contexts of one GPU: the primary
// context, then a context made with cuCtxCreate and made current. The
// runtime loads its library once; each context gets its own module, and
// the interposer binds the probed image (its maps, stream and clock
// offset) in each (make gpu-test, probes-count-twoctx). Prints a checksum
// per context and the grid it launched.
//   twoctx [N] [LAUNCHES_PER_CONTEXT] [keep | reset]
// keep: the second context is not destroyed; reset: it is, and then
// cudaDeviceReset() ends the primary context too, as many applications do
// before they exit.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda.h>
#include <cuda_runtime.h>

__global__ void bump(float *x, float s, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] = x[i] * s + 1.f;
}

static double run(int n, int launches)
{
	float *d, *h = (float *)malloc((size_t)n * sizeof(float));
	if (cudaMalloc(&d, (size_t)n * sizeof(float)) != cudaSuccess) {
		fprintf(stderr, "cudaMalloc: %s\n", cudaGetErrorString(cudaGetLastError()));
		exit(1);
	}
	cudaMemset(d, 0, (size_t)n * sizeof(float));
	for (int i = 0; i < launches; i++)
		bump<<<(n + 255) / 256, 256>>>(d, 0.5f, n);
	if (cudaDeviceSynchronize() != cudaSuccess) {
		fprintf(stderr, "kernel: %s\n", cudaGetErrorString(cudaGetLastError()));
		exit(1);
	}
	cudaMemcpy(h, d, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost);
	double sum = 0;
	for (int i = 0; i < n; i++)
		sum += h[i];
	cudaFree(d);
	free(h);
	return sum;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : (1 << 20);
	int launches = argc > 2 ? atoi(argv[2]) : 5;
	double a = run(n, launches); /* the primary context */
	CUdevice dev;
	CUcontext ctx;
	CUresult r = cuDeviceGet(&dev, 0);
#if CUDA_VERSION >= 13000
	if (r == CUDA_SUCCESS)
		r = cuCtxCreate(&ctx, NULL, 0, dev);
#else
	if (r == CUDA_SUCCESS)
		r = cuCtxCreate(&ctx, 0, dev);
#endif
	if (r == CUDA_SUCCESS)
		r = cuCtxSetCurrent(ctx);
	if (r != CUDA_SUCCESS) {
		fprintf(stderr, "second context: CUresult %d\n", (int)r);
		return 1;
	}
	double b = run(n, launches); /* the created context */
	printf("twoctx checksum ctx1=%.1f ctx2=%.1f\n", a, b);
	printf("twoctx grid launches=%d blocks=%d\n", 2 * launches, 2 * launches * ((n + 255) / 256));
	fflush(stdout);
	if (!(argc > 3 && !strcmp(argv[3], "keep")))
		cuCtxDestroy(ctx);
	if (argc > 3 && !strcmp(argv[3], "reset") && cudaDeviceReset() != cudaSuccess) {
		fprintf(stderr, "cudaDeviceReset: %s\n", cudaGetErrorString(cudaGetLastError()));
		return 1;
	}
	return 0;
}
