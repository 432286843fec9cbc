// hash_stress.cu - the device hash map of the probe helper library
// (gpubpf/helpers/helpers.cu, included as is) under contention, on the
// GPU: every launch, thousands of threads insert, delete and look up a few
// dozen keys of a small table (max_entries 32, 64 buckets), many threads on
// the same key at once, so chains are long and inserts race deletes. After
// each launch the host reads the table back and checks what a user of the
// map relies on:
//   - no key is live in two buckets (two inserters of one new key);
//   - the live-entry count word equals the live buckets (unless GX_OLD:
//     a helper library without the count word);
//   - no more than max_entries keys are live;
//   - no bucket is left half-written;
//   - every live key is found by lookup, with the value of its bucket.
// Prints one line: "PASS hash-stress ..." or "FAIL hash-stress: ...".
//
//   nvcc -O2 -arch=sm_90 -I kmod/include -o hash_stress test/gpu/hash_stress.cu
//   hash_stress [LAUNCHES]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#include "../../gpubpf/helpers/helpers.cu"

#define MAX_ENTRIES 32u
#define NBUCKETS 64u
#define NKEYS 48u
#define KEY_SIZE 4u
#define VALUE_SIZE 8u
#define STRIDE (8u + 8u + 8u)

enum { S_INSERT_OK, S_INSERT_E2BIG, S_DELETE_OK, S_DELETE_ENOENT, S_LOOKUP_HIT, S_OTHER, S_N };

static __device__ __forceinline__ u32 mix(u32 x)
{
	x ^= x >> 16;
	x *= 0x7feb352dU;
	x ^= x >> 15;
	x *= 0x846ca68bU;
	x ^= x >> 16;
	return x;
}

__global__ void churn(u64 map, u32 round, unsigned long long *stats)
{
	u32 t = blockIdx.x * blockDim.x + threadIdx.x;
	u32 r = mix(t * 0x9e3779b9U ^ mix(round));
	u32 key = r % NKEYS;
	u64 val = ((u64)round << 32) | t;
	u32 op = (r >> 20) % 8;
	u64 rc;

	if (op < 4) { /* half the threads insert: many on one key at a time */
		rc = __gpuext_h_map_update_elem(map, (u64)&key, (u64)&val, GX_BPF_ANY);
		atomicAdd(&stats[rc == 0 ? S_INSERT_OK : rc == gx_err(GX_E2BIG) ? S_INSERT_E2BIG : S_OTHER], 1ull);
	} else if (op < 7) {
		rc = __gpuext_h_map_delete_elem(map, (u64)&key);
		atomicAdd(&stats[rc == 0 ? S_DELETE_OK : rc == gx_err(GX_ENOENT) ? S_DELETE_ENOENT : S_OTHER], 1ull);
	} else if (__gpuext_h_map_lookup_elem(map, (u64)&key)) {
		atomicAdd(&stats[S_LOOKUP_HIT], 1ull);
	}
}

/* every key: lookup's value address, relative to the map (0: absent) */
__global__ void lookup_all(u64 map, u64 *found)
{
	u32 key = threadIdx.x;
	if (key < NKEYS) {
		u64 v = __gpuext_h_map_lookup_elem(map, (u64)&key);
		found[key] = v ? v - map : 0;
	}
}

static void check(cudaError_t e, const char *what)
{
	if (e != cudaSuccess) {
		printf("FAIL hash-stress: %s: %s\n", what, cudaGetErrorString(e));
		exit(1);
	}
}

int main(int argc, char **argv)
{
	int launches = argc > 1 ? atoi(argv[1]) : 2000;
	size_t data = (size_t)NBUCKETS * STRIDE + 8, bytes = GPUEXT_DMAP_HDR_SIZE + data;
	std::vector<unsigned char> img(bytes, 0), back(bytes);
	struct gpuext_dmap d = {};
	d.type = GPUEXT_DMAP_HASH;
	d.key_size = KEY_SIZE;
	d.value_size = VALUE_SIZE;
	d.max_entries = MAX_ENTRIES;
	d.nbuckets = NBUCKETS;
	d.stride = STRIDE;
	d.data_size = data;
	memcpy(img.data(), &d, sizeof(d));

	unsigned char *dmap;
	unsigned long long *dstats, stats[S_N];
	u64 *dfound, found[NKEYS];
	check(cudaMalloc(&dmap, bytes), "cudaMalloc");
	check(cudaMalloc(&dstats, sizeof(stats)), "cudaMalloc");
	check(cudaMalloc(&dfound, sizeof(found)), "cudaMalloc");
	check(cudaMemcpy(dmap, img.data(), bytes, cudaMemcpyHostToDevice), "upload");
	check(cudaMemset(dstats, 0, sizeof(stats)), "memset");

	long dup = 0, count_bad = 0, over = 0, busy = 0, lookup_bad = 0, max_live = 0;
	char first[256] = "";
	for (int round = 0; round < launches; round++) {
		churn<<<32, 128>>>((u64)dmap, (u32)round, dstats);
		lookup_all<<<1, 64>>>((u64)dmap, dfound);
		check(cudaMemcpy(back.data(), dmap, bytes, cudaMemcpyDeviceToHost), "read back");
		check(cudaMemcpy(found, dfound, sizeof(found), cudaMemcpyDeviceToHost), "read back");
		int live = 0, seen[NKEYS], at[NKEYS];
		memset(seen, 0, sizeof(seen));
		for (u32 b = 0; b < NBUCKETS; b++) {
			const unsigned char *p = back.data() + GPUEXT_DMAP_HDR_SIZE + (size_t)b * STRIDE;
			u32 st, key;
			memcpy(&st, p, 4);
			memcpy(&key, p + 8, 4);
			if (st == GX_HASH_BUSY)
				busy++;
			if (st != GX_HASH_LIVE)
				continue;
			live++;
			if (key < NKEYS && seen[key]++ == 0)
				at[key] = (int)b;
			else if (key < NKEYS && !first[0])
				snprintf(first, sizeof(first), "round %d: key %u live in buckets %d and %u", round, key, at[key], b);
			if (key < NKEYS && seen[key] == 2)
				dup++;
		}
		if (live > max_live)
			max_live = live;
		if (live > (int)MAX_ENTRIES)
			over++;
#ifndef GX_OLD
		unsigned long long count;
		memcpy(&count, back.data() + GPUEXT_DMAP_HDR_SIZE + (size_t)NBUCKETS * STRIDE, 8);
		if (count != (unsigned long long)live) {
			count_bad++;
			if (!first[0])
				snprintf(first, sizeof(first), "round %d: count word %llu, %d live buckets", round, count, live);
		}
#endif
		for (u32 k = 0; k < NKEYS; k++) {
			u64 want = seen[k] ? GPUEXT_DMAP_HDR_SIZE + (u64)at[k] * STRIDE + 16 : 0;
			if (found[k] != want) {
				lookup_bad++;
				if (!first[0])
					snprintf(first, sizeof(first), "round %d: lookup of key %u at %llu, its first live bucket at %llu", round, k,
						 (unsigned long long)found[k], (unsigned long long)want);
			}
		}
	}
	check(cudaMemcpy(stats, dstats, sizeof(stats), cudaMemcpyDeviceToHost), "stats");
	int ok = !dup && !count_bad && !over && !busy && !lookup_bad && stats[S_OTHER] == 0 && stats[S_INSERT_E2BIG] > 0;
	printf("%s hash-stress launches=%d threads=%d inserts=%llu e2big=%llu deletes=%llu enoent=%llu lookup_hits=%llu "
	       "max_live=%ld duplicates=%ld count_mismatch=%ld over_max=%ld half_written=%ld lookup_mismatch=%ld other_rc=%llu%s%s\n",
	       ok ? "PASS" : "FAIL", launches, 32 * 128, stats[S_INSERT_OK], stats[S_INSERT_E2BIG], stats[S_DELETE_OK],
	       stats[S_DELETE_ENOENT], stats[S_LOOKUP_HIT], max_live, dup, count_bad, over, busy, lookup_bad, stats[S_OTHER],
	       first[0] ? "; first: " : "", first);
	return ok ? 0 : 1;
}
