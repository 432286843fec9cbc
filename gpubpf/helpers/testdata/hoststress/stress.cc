/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * stress.cc - the helper library's hash map (helpers.cu, compiled for the
 * host with ../hostdiff/shim.h: real atomics) under real concurrency:
 * threads insert one key while others delete and re-insert keys earlier in
 * the same probe sequence, and every thread yields between its walk and its
 * claim (GX_TEST_RACE_POINT), the window in which two inserters of one key
 * could claim two buckets. After each round (threads joined) the table is
 * checked: no key live twice, the count word equal to the live buckets, at
 * most max_entries live, no bucket left half-written, lookup finding the
 * first copy. Prints "PASS ..." or "FAIL ..." and exits 0 or 1.
 *
 *   stress [ROUNDS] [THREADS]
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
extern "C" u64 __gpuext_h_map_delete_elem(u64 map, u64 key);

static thread_local u32 rng;

static u32 next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 17;
	rng ^= rng << 5;
	return rng;
}

void gx_test_race_point(void)
{
	if (next_rand() % 2)
		sched_yield();
}

enum { MAX_ENTRIES = 8, NBUCKETS = 16, STRIDE = 8 + 8 + 8, CHAIN = 6 };

static unsigned char *img;
static u32 keys[CHAIN]; /* keys whose probe sequences start at the same bucket */
static int round_no;

static u32 fnv(u32 k)
{
	u32 h = 2166136261u;
	for (int i = 0; i < 4; i++) {
		h ^= (k >> (8 * i)) & 0xff;
		h *= 16777619u;
	}
	return h;
}

struct arg {
	int id;
};

static void *worker(void *p)
{
	int id = ((arg *)p)->id;
	rng = 0x9e3779b9u * (u32)(id + 1) ^ (u32)round_no * 2654435761u;
	if (!rng)
		rng = 1;
	for (int i = 0; i < 200; i++) {
		u32 r = next_rand();
		/* half the threads hammer the last key of the chain; the rest churn the earlier ones */
		u32 key = id % 2 ? keys[CHAIN - 1] : keys[r % (CHAIN - 1)];
		u64 val = ((u64)id << 32) | (u32)i;
		if (id % 2 || r % 3 == 0)
			__gpuext_h_map_update_elem((u64)img, (u64)&key, (u64)&val, 0);
		else
			__gpuext_h_map_delete_elem((u64)img, (u64)&key);
	}
	return nullptr;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 300, nthreads = argc > 2 ? atoi(argv[2]) : 8;
	size_t data = (size_t)NBUCKETS * STRIDE + 8;
	std::vector<unsigned char> buf(GPUEXT_DMAP_HDR_SIZE + data + 8);
	img = buf.data();
	struct gpuext_dmap d = {};
	d.type = GPUEXT_DMAP_HASH;
	d.key_size = 4;
	d.value_size = 8;
	d.max_entries = MAX_ENTRIES;
	d.nbuckets = NBUCKETS;
	d.stride = STRIDE;
	d.data_size = data;
	memcpy(img, &d, sizeof(d));
	for (u32 k = 1, n = 0; n < CHAIN; k++)
		if ((fnv(k) & (NBUCKETS - 1)) == 3)
			keys[n++] = k;

	long dup = 0, count_bad = 0, over = 0, busy = 0, lookup_bad = 0;
	char first[200] = "";
	for (round_no = 0; round_no < rounds; round_no++) {
		std::vector<pthread_t> th(nthreads);
		std::vector<arg> args(nthreads);
		for (int i = 0; i < nthreads; i++) {
			args[i].id = i;
			pthread_create(&th[i], nullptr, worker, &args[i]);
		}
		for (int i = 0; i < nthreads; i++)
			pthread_join(th[i], nullptr);
		int live = 0, seen[CHAIN] = {0}, at[CHAIN] = {0};
		for (u32 b = 0; b < NBUCKETS; b++) {
			unsigned char *p = img + GPUEXT_DMAP_HDR_SIZE + (size_t)b * STRIDE;
			u32 st, key;
			memcpy(&st, p, 4);
			memcpy(&key, p + 8, 4);
			busy += st == 1;
			if (st != 2)
				continue;
			live++;
			for (int k = 0; k < CHAIN; k++)
				if (keys[k] == key) {
					if (seen[k]++ == 0)
						at[k] = (int)b;
					else {
						dup++;
						if (!first[0])
							snprintf(first, sizeof(first), "round %d: key %u live in buckets %d and %u", round_no, key, at[k], b);
					}
				}
		}
		u64 count;
		memcpy(&count, img + GPUEXT_DMAP_HDR_SIZE + (size_t)NBUCKETS * STRIDE, 8);
		if (count != (u64)live) {
			count_bad++;
			if (!first[0])
				snprintf(first, sizeof(first), "round %d: count word %llu, %d live buckets", round_no, count, live);
		}
		over += live > MAX_ENTRIES;
		for (int k = 0; k < CHAIN; k++) {
			u64 v = __gpuext_h_map_lookup_elem((u64)img, (u64)&keys[k]);
			u64 want = seen[k] ? (u64)img + GPUEXT_DMAP_HDR_SIZE + (u64)at[k] * STRIDE + 16 : 0;
			if (v != want) {
				lookup_bad++;
				if (!first[0])
					snprintf(first, sizeof(first), "round %d: lookup of key %u off its first live bucket", round_no, keys[k]);
			}
		}
	}
	int ok = !dup && !count_bad && !over && !busy && !lookup_bad;
	printf("%s rounds=%d threads=%d duplicates=%ld count_mismatch=%ld over_max=%ld half_written=%ld lookup_mismatch=%ld%s%s\n",
	       ok ? "PASS" : "FAIL", rounds, nthreads, dup, count_bad, over, busy, lookup_bad, first[0] ? "; first: " : "", first);
	return ok ? 0 : 1;
}
