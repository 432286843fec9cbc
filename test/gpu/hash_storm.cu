// hash_storm.cu - the device hash map of the probe helper library
// (gpubpf/helpers/helpers.cu, included as is) under bpftime's
// cuda-counter storm, on the GPU: every thread of 64 blocks of 256 updates
// its block's key (u64 blockIdx.x, BPF_ANY) into a hash whose max_entries is
// exactly 64 (128 buckets, as gpubpf/abi.Layout sizes it), 10 launches. No more
// keys than max_entries are ever inserted, so every update must return 0
// and, after the first launch already, all 64 keys must be live once, the
// live-entry count word equal to the live buckets, no bucket half-written.
// Prints one line: "PASS hash-storm ..." or "FAIL hash-storm: ...".
//
//   nvcc -O2 -arch=sm_90 -I kmod/include -o hash_storm test/gpu/hash_storm.cu
//   hash_storm [LAUNCHES]
//
// -DGX_HELPERS_CU='"path/helpers.cu"' builds it against another copy of the
// library (an older one, to see the defect it fixes).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#ifndef GX_HELPERS_CU
#define GX_HELPERS_CU "../../gpubpf/helpers/helpers.cu"
#endif
#include GX_HELPERS_CU

#define BLOCKS 64u
#define THREADS 256u
#define MAX_ENTRIES 64u
#define NBUCKETS 128u
#define STRIDE (8u + 8u + 8u)

enum { S_OK, S_E2BIG, S_OTHER, S_N };

__global__ void storm(u64 map, u32 launch, unsigned long long *stats)
{
	u64 key = blockIdx.x;
	u64 ts = ((u64)launch << 32) | (blockIdx.x * blockDim.x + threadIdx.x);
	u64 rc = __gpuext_h_map_update_elem(map, (u64)&key, (u64)&ts, GX_BPF_ANY);
	atomicAdd(&stats[rc == 0 ? S_OK : rc == gx_err(GX_E2BIG) ? S_E2BIG : S_OTHER], 1ull);
}

static void check(cudaError_t e, const char *what)
{
	if (e != cudaSuccess) {
		printf("FAIL hash-storm: %s: %s\n", what, cudaGetErrorString(e));
		exit(1);
	}
}

int main(int argc, char **argv)
{
	int launches = argc > 1 ? atoi(argv[1]) : 10;
	size_t data = (size_t)NBUCKETS * STRIDE + 8, bytes = GPUEXT_DMAP_HDR_SIZE + data;
	std::vector<unsigned char> img(bytes, 0), back(bytes);
	struct gpuext_dmap d = {};
	d.type = GPUEXT_DMAP_HASH;
	d.key_size = 8;
	d.value_size = 8;
	d.max_entries = MAX_ENTRIES;
	d.nbuckets = NBUCKETS;
	d.stride = STRIDE;
	d.data_size = data;
	memcpy(img.data(), &d, sizeof(d));

	unsigned char *dmap;
	unsigned long long *dstats, stats[S_N];
	check(cudaMalloc(&dmap, bytes), "cudaMalloc");
	check(cudaMalloc(&dstats, sizeof(stats)), "cudaMalloc");
	check(cudaMemcpy(dmap, img.data(), bytes, cudaMemcpyHostToDevice), "upload");
	check(cudaMemset(dstats, 0, sizeof(stats)), "memset");

	long missing = 0, dup = 0, count_bad = 0, busy = 0;
	int live_first = -1, live = 0;
	char first[256] = "";
	for (int l = 0; l < launches; l++) {
		storm<<<BLOCKS, THREADS>>>((u64)dmap, (u32)l, dstats);
		check(cudaDeviceSynchronize(), "storm");
		check(cudaMemcpy(back.data(), dmap, bytes, cudaMemcpyDeviceToHost), "read back");
		int seen[BLOCKS] = {0};
		live = 0;
		for (u32 b = 0; b < NBUCKETS; b++) {
			const unsigned char *p = back.data() + GPUEXT_DMAP_HDR_SIZE + (size_t)b * STRIDE;
			u32 st;
			u64 key;
			memcpy(&st, p, 4);
			memcpy(&key, p + 8, 8);
			busy += st == GX_HASH_BUSY;
			if (st != GX_HASH_LIVE)
				continue;
			live++;
			if (key < BLOCKS && seen[key]++ == 1) {
				dup++;
				if (!first[0])
					snprintf(first, sizeof(first), "launch %d: key %llu live twice", l, key);
			}
		}
		if (live_first < 0)
			live_first = live;
		for (u32 k = 0; k < BLOCKS; k++)
			if (!seen[k]) {
				missing++;
				if (!first[0])
					snprintf(first, sizeof(first), "launch %d: %d of %u keys live, key %u missing", l, live, BLOCKS, k);
			}
		unsigned long long count;
		memcpy(&count, back.data() + GPUEXT_DMAP_HDR_SIZE + (size_t)NBUCKETS * STRIDE, 8);
		if (count != (unsigned long long)live) {
			count_bad++;
			if (!first[0])
				snprintf(first, sizeof(first), "launch %d: count word %llu, %d live buckets", l, count, live);
		}
	}
	check(cudaMemcpy(stats, dstats, sizeof(stats), cudaMemcpyDeviceToHost), "stats");
	unsigned long long want = (unsigned long long)launches * BLOCKS * THREADS;
	int ok = launches > 0 && stats[S_OK] == want && !missing && !dup && !count_bad && !busy;
	printf("%s hash-storm launches=%d threads=%u keys=%u max_entries=%u updates_ok=%llu e2big=%llu other_rc=%llu "
	       "live_after_first=%d live_after_last=%d missing=%ld duplicates=%ld count_mismatch=%ld half_written=%ld%s%s\n",
	       ok ? "PASS" : "FAIL", launches, BLOCKS * THREADS, BLOCKS, MAX_ENTRIES, stats[S_OK], stats[S_E2BIG],
	       stats[S_OTHER], live_first, live, missing, dup, count_bad, busy, first[0] ? "; first: " : "", first);
	return ok ? 0 : 1;
}
