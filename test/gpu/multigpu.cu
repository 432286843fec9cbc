// multigpu.cu - the CUDA program of gpu-test's multi-gpu section
// (test/gpu/multi_gpu.sh): runs its arguments as steps, in order, on the
// devices the process sees (after CUDA_VISIBLE_DEVICES), and prints one
// result line per step for the script to compare.
//
//   count             devices N
//   list              dev I pci=DOMAIN:BUS:DEVICE uuid=GPU-... total=BYTES sms=N (one line per device)
//   device D          device D ok|<error>                (cudaSetDevice)
//   alloc BYTES       alloc BYTES ok|oom|<error>         (cudaMalloc on the current device, kept)
//   info              info dev=D free=F total=T          (cudaMemGetInfo: cuMemGetInfo underneath)
//   ctx               ctx dev=D context=0x...            (the current context, as the interposer's
//                                                         probe status lines print it)
//   launch N BLOCKS   launched dev=D n=N blocks=N*BLOCKS sum=S   (N launches of gx_tick, then a sync;
//                                                         S: the blocks the kernels counted themselves)
//   sms BLOCKS        sms dev=D used=U of=SMS            (one kernel of BLOCKS blocks, each spinning
//                                                         ~20us; U: the distinct SMs its blocks ran on)
//   hold              holding, then keeps its memory until killed
// Built with -arch=sm_90 (SASS + PTX) so that device probes can be spliced
// into gx_tick; gx_tick and gx_smid are extern "C" so that a probe's
// --kernel can name them.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

extern "C" __global__ void gx_tick(unsigned long long *blocks)
{
	if (threadIdx.x == 0)
		atomicAdd(blocks, 1ull);
}

static __device__ unsigned long long gx_now_ns(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

extern "C" __global__ void gx_smid(unsigned *seen, int nseen, unsigned long long ns)
{
	unsigned id;
	asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
	unsigned long long t0 = gx_now_ns();
	while (gx_now_ns() - t0 < ns)
		;
	if (threadIdx.x == 0 && id < (unsigned)nseen)
		seen[id] = 1;
}

static const char *err_name(cudaError_t e)
{
	return e == cudaErrorMemoryAllocation ? "oom" : cudaGetErrorName(e);
}

static int cur_dev(void)
{
	int d = -1;
	cudaGetDevice(&d);
	return d;
}

static void list(void)
{
	int n = 0;
	cudaGetDeviceCount(&n);
	for (int i = 0; i < n; i++) {
		cudaDeviceProp p;
		if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
			printf("dev %d error\n", i);
			continue;
		}
		const unsigned char *u = (const unsigned char *)p.uuid.bytes;
		printf("dev %d pci=%08x:%02x:%02x.0 uuid=GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x "
		       "total=%zu sms=%d\n",
		       i, p.pciDomainID, p.pciBusID, p.pciDeviceID, u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9],
		       u[10], u[11], u[12], u[13], u[14], u[15], p.totalGlobalMem, p.multiProcessorCount);
	}
}

static int launch(long n, unsigned blocks)
{
	unsigned long long *d = NULL, sum = 0;
	cudaError_t e = cudaMalloc(&d, sizeof(*d));
	if (e == cudaSuccess)
		e = cudaMemset(d, 0, sizeof(*d));
	for (long i = 0; e == cudaSuccess && i < n; i++) {
		gx_tick<<<blocks, 64>>>(d);
		e = cudaGetLastError();
	}
	if (e == cudaSuccess)
		e = cudaMemcpy(&sum, d, sizeof(sum), cudaMemcpyDeviceToHost);
	cudaFree(d);
	if (e != cudaSuccess) {
		printf("launched dev=%d error %s\n", cur_dev(), cudaGetErrorName(e));
		return 1;
	}
	printf("launched dev=%d n=%ld blocks=%llu sum=%llu\n", cur_dev(), n, (unsigned long long)n * blocks, sum);
	return 0;
}

static int sms(unsigned blocks)
{
	enum { NSEEN = 1024 };
	unsigned *d = NULL, h[NSEEN];
	int dev = cur_dev(), nsm = 0, used = 0;
	cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev);
	cudaError_t e = cudaMalloc(&d, sizeof(h));
	if (e == cudaSuccess)
		e = cudaMemset(d, 0, sizeof(h));
	if (e == cudaSuccess) {
		gx_smid<<<blocks, 128>>>(d, NSEEN, 20000); /* 20 us a block: the blocks spread over every SM they may use */
		e = cudaDeviceSynchronize();
	}
	if (e == cudaSuccess)
		e = cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost);
	cudaFree(d);
	if (e != cudaSuccess) {
		printf("sms dev=%d error %s\n", dev, cudaGetErrorName(e));
		return 1;
	}
	for (int i = 0; i < NSEEN; i++)
		used += h[i] != 0;
	printf("sms dev=%d used=%d of=%d\n", dev, used, nsm);
	return 0;
}

int main(int argc, char **argv)
{
	int rc = 0;
	for (int i = 1; i < argc; i++) {
		const char *s = argv[i];
		const char *a1 = i + 1 < argc ? argv[i + 1] : "0";
		const char *a2 = i + 2 < argc ? argv[i + 2] : "0";
		if (!strcmp(s, "count")) {
			int n = 0;
			cudaError_t e = cudaGetDeviceCount(&n);
			if (e == cudaSuccess)
				printf("devices %d\n", n);
			else
				printf("devices error %s\n", cudaGetErrorName(e));
		} else if (!strcmp(s, "list")) {
			list();
		} else if (!strcmp(s, "device")) {
			cudaError_t e = cudaSetDevice(atoi(a1));
			printf("device %s %s\n", a1, e == cudaSuccess ? "ok" : cudaGetErrorName(e));
			rc |= e != cudaSuccess;
			i++;
		} else if (!strcmp(s, "alloc")) {
			size_t sz = strtoull(a1, NULL, 10);
			void *p = NULL;
			cudaError_t e = cudaMalloc(&p, sz);
			printf("alloc %zu %s\n", sz, e == cudaSuccess ? "ok" : err_name(e));
			if (e != cudaSuccess)
				cudaGetLastError();
			i++;
		} else if (!strcmp(s, "info")) {
			size_t fr = 0, tot = 0;
			cudaError_t e = cudaMemGetInfo(&fr, &tot);
			if (e == cudaSuccess)
				printf("info dev=%d free=%zu total=%zu\n", cur_dev(), fr, tot);
			else
				printf("info dev=%d error %s\n", cur_dev(), cudaGetErrorName(e));
		} else if (!strcmp(s, "ctx")) {
			CUcontext c = NULL;
			cudaFree(0); /* the device's primary context, made current */
			cuCtxGetCurrent(&c);
			printf("ctx dev=%d context=%p\n", cur_dev(), (void *)c);
		} else if (!strcmp(s, "launch")) {
			rc |= launch(atol(a1), (unsigned)atoi(a2));
			i += 2;
		} else if (!strcmp(s, "sms")) {
			rc |= sms((unsigned)atoi(a1));
			i++;
		} else if (!strcmp(s, "hold")) {
			printf("holding\n");
			fflush(stdout);
			for (;;)
				pause(); /* keep the memory until killed */
		} else {
			fprintf(stderr, "unknown step %s\n", s);
			return 2;
		}
		fflush(stdout);
	}
	return rc;
}
