// gemm.cu - a cuBLAS SGEMM whose checksum must not change when the device
// runtime is loaded (test/gpu/gpu-test.sh).
#include <cstdio>
#include <vector>
#include <cublas_v2.h>
#include <cuda_runtime.h>

int main()
{
	const int n = 2048;
	std::vector<float> h(n * n);
	for (int i = 0; i < n * n; i++)
		h[i] = (float)((i * 37) % 101) / 101.0f;
	float *a, *b, *c;
	cudaMalloc(&a, n * n * sizeof(float));
	cudaMalloc(&b, n * n * sizeof(float));
	cudaMalloc(&c, n * n * sizeof(float));
	cudaMemcpy(a, h.data(), n * n * sizeof(float), cudaMemcpyHostToDevice);
	cudaMemcpy(b, h.data(), n * n * sizeof(float), cudaMemcpyHostToDevice);
	cublasHandle_t hd;
	if (cublasCreate(&hd) != CUBLAS_STATUS_SUCCESS) {
		printf("cublasCreate failed\n");
		return 1;
	}
	cublasSetMathMode(hd, CUBLAS_PEDANTIC_MATH);
	const float one = 1.0f, zero = 0.0f;
	cublasSgemm(hd, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n);
	cudaMemcpy(h.data(), c, n * n * sizeof(float), cudaMemcpyDeviceToHost);
	double s = 0;
	for (int i = 0; i < n * n; i += 17)
		s += h[i];
	printf("gemm_checksum %.6e\n", s);
	cublasDestroy(hd);
	return 0;
}
