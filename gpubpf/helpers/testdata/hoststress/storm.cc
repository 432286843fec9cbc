/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * storm.cc - the helper library's hash map (helpers.cu, compiled for the
 * host with ../hostdiff/shim.h: real atomics) under an update storm of the
 * shape bpftime's cuda-counter makes on the GPU: every thread of every
 * "block" updates its block's key with BPF_ANY, many threads per key at
 * once, into a hash whose max_entries is exactly the number of keys. The
 * threads of a round start together (a barrier, as the lanes of a launch)
 * and each yields between its walk and its claim (GX_TEST_RACE_POINT).
 * With no more keys than max_entries (the default, MAX = KEYS), as in the
 * kernel no update may fail and after each round every key must be live
 * once. With more keys than MAX, only -E2BIG may be returned and exactly
 * MAX keys must be live (no delete ever frees a place, so the table fills
 * up). Always: no key live twice, the count word equal to the live buckets,
 * never more than MAX live, and the count word, sampled while the threads
 * run, never past MAX (only a thread holding a bucket for a new key holds a
 * place in it). Prints "PASS ..." or "FAIL ..." and exits 0 or 1.
 *
 *   storm [ROUNDS] [THREADS_PER_KEY] [KEYS] [MAX]
 */
#include <pthread.h>
#include <sched.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <gpuext_abi.h>

typedef unsigned long long u64;
typedef unsigned int u32;

unsigned int gx_test_smid, gx_test_warpid;

extern "C" u64 __gpuext_h_map_lookup_elem(u64 map, u64 key);
extern "C" u64 __gpuext_h_map_update_elem(u64 map, u64 key, u64 value, u64 flags);

static thread_local u32 rng;

void gx_test_race_point(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 17;
	rng ^= rng << 5;
	if (rng % 2)
		sched_yield();
}

enum { STRIDE = 8 + 8 + 8 }; /* u64 key, u64 value, as cuda-counter's start map */

static unsigned char *img;
static u32 nbuckets;
static u64 max_entries;
static int per_key, round_no;
static pthread_barrier_t start;
static long failed; /* updates that returned nonzero */
static long e2big, other_err;
static volatile int running;
static u64 count_peak;

static u64 *count_word(void)
{
	return (u64 *)(img + GPUEXT_DMAP_HDR_SIZE + (size_t)nbuckets * STRIDE);
}

static void *lane(void *p)
{
	long id = (long)p;
	u64 key = (u64)(id / per_key), ts = ((u64)round_no << 32) | (u64)id;
	rng = 0x9e3779b9u * (u32)(id + 1) ^ (u32)round_no * 2654435761u;
	if (!rng)
		rng = 1;
	pthread_barrier_wait(&start);
	u64 r = __gpuext_h_map_update_elem((u64)img, (u64)&key, (u64)&ts, 0);
	if (r) {
		__atomic_fetch_add(&failed, 1, __ATOMIC_RELAXED);
		if ((long long)r == -7)
			__atomic_fetch_add(&e2big, 1, __ATOMIC_RELAXED);
		else
			__atomic_fetch_add(&other_err, 1, __ATOMIC_RELAXED);
	}
	return nullptr;
}

/* Samples the count word while the lanes run (its peak must not pass MAX
 * when there are no more keys than MAX: a sample can miss a peak, never
 * invent one). */
static void *sampler(void *)
{
	while (__atomic_load_n(&running, __ATOMIC_ACQUIRE)) {
		u64 c = __atomic_load_n(count_word(), __ATOMIC_RELAXED);
		if (c > count_peak)
			count_peak = c;
		sched_yield();
	}
	return nullptr;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 20;
	per_key = argc > 2 ? atoi(argv[2]) : 4;
	int keys = argc > 3 ? atoi(argv[3]) : 64;
	int max = argc > 4 ? atoi(argv[4]) : keys;
	if (rounds < 1 || per_key < 1 || keys < 1 || keys > 4096 || max < 1 || max > 4096) {
		fprintf(stderr, "usage: storm [ROUNDS] [THREADS_PER_KEY] [KEYS<=4096] [MAX<=4096]\n");
		return 2;
	}
	max_entries = (u64)max;
	for (nbuckets = 1; nbuckets < 2 * (u32)max; nbuckets <<= 1) /* as probe.Layout */
		;
	size_t data = (size_t)nbuckets * STRIDE + 8;
	std::vector<unsigned char> buf(GPUEXT_DMAP_HDR_SIZE + data);
	img = buf.data();
	struct gpuext_dmap d = {};
	d.type = GPUEXT_DMAP_HASH;
	d.key_size = 8;
	d.value_size = 8;
	d.max_entries = (u32)max;
	d.nbuckets = nbuckets;
	d.stride = STRIDE;
	d.data_size = data;
	memcpy(img, &d, sizeof(d));

	int nthreads = keys * per_key;
	pthread_attr_t attr; /* hundreds of threads: small stacks */
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	long missing = 0, dup = 0, count_bad = 0, over = 0, busy = 0;
	int want_live = keys < max ? keys : max;
	char first[200] = "";
	for (round_no = 0; round_no < rounds; round_no++) {
		std::vector<pthread_t> th(nthreads);
		pthread_t samp;
		pthread_barrier_init(&start, nullptr, (unsigned)nthreads);
		running = 1;
		pthread_create(&samp, nullptr, sampler, nullptr);
		for (long i = 0; i < nthreads; i++)
			if (pthread_create(&th[i], &attr, lane, (void *)i)) {
				fprintf(stderr, "storm: pthread_create failed at thread %ld\n", i);
				return 2;
			}
		for (int i = 0; i < nthreads; i++)
			pthread_join(th[i], nullptr);
		__atomic_store_n(&running, 0, __ATOMIC_RELEASE);
		pthread_join(samp, nullptr);
		pthread_barrier_destroy(&start);

		std::vector<int> seen(keys, 0);
		int live = 0;
		for (u32 b = 0; b < nbuckets; b++) {
			unsigned char *p = img + GPUEXT_DMAP_HDR_SIZE + (size_t)b * STRIDE;
			u32 st;
			u64 key;
			memcpy(&st, p, 4);
			memcpy(&key, p + 8, 8);
			busy += st == 1;
			if (st != 2)
				continue;
			live++;
			if (key < (u64)keys && seen[key]++) {
				dup++;
				if (!first[0])
					snprintf(first, sizeof(first), "round %d: key %llu live twice", round_no, key);
			}
		}
		for (int k = 0; k < keys; k++) {
			u64 key = (u64)k;
			if (!seen[k] != !__gpuext_h_map_lookup_elem((u64)img, (u64)&key) || (keys <= max && !seen[k])) {
				missing++;
				if (!first[0])
					snprintf(first, sizeof(first), "round %d: key %d missing (%d of %d keys live)", round_no, k, live, keys);
			}
		}
		if (live != want_live) {
			missing++;
			if (!first[0])
				snprintf(first, sizeof(first), "round %d: %d keys live, want %d (%d keys, max_entries %d)", round_no, live, want_live, keys, max);
		}
		u64 count = *count_word();
		if (count != (u64)live) {
			count_bad++;
			if (!first[0])
				snprintf(first, sizeof(first), "round %d: count word %llu, %d live buckets", round_no, count, live);
		}
		over += live > max;
		if ((other_err || (keys <= max && failed)) && !first[0])
			snprintf(first, sizeof(first), "round %d: %ld updates failed so far (%ld -E2BIG) with %d keys and max_entries %d",
				 round_no, failed, e2big, keys, max);
	}
	int peak_bad = keys <= max && count_peak > (u64)max;
	int ok = !other_err && !(keys <= max && failed) && !missing && !dup && !count_bad && !over && !busy && !peak_bad;
	printf("%s rounds=%d keys=%d max_entries=%d threads_per_key=%d failed_updates=%ld e2big=%ld missing_keys=%ld "
	       "duplicates=%ld count_mismatch=%ld over_max=%ld half_written=%ld count_peak=%llu%s%s\n",
	       ok ? "PASS" : "FAIL", rounds, keys, max, per_key, failed, e2big, missing, dup, count_bad, over, busy,
	       count_peak, first[0] ? "; first: " : "", first);
	return ok ? 0 : 1;
}
