/*
 * helpers.cu - the device-side helper library of gpuext device probes.
 *
 * The PTX translator (gpubpf/ptx) turns a probe's map and ringbuf helper
 * calls into calls of the functions below; build.sh compiles this file to
 * helpers.ptx, which helpers.go embeds and the translator appends to every
 * probe module.  Names, argument order and return values are the contract of
 * docs/device-probes.md (abi.FuncMapLookup and friends, gpubpf/abi): every argument and
 * every return value is 64 bits wide, errors are negative errno values.
 *
 * A map argument is the generic address of the map's 32-byte descriptor
 * (struct gpuext_dmap, kmod/include/gpuext_abi.h); the data follows it.
 * Keys and values are generic addresses too (the probe's .local stack, or a
 * map value).
 *
 * Semantics, per map type.  The executable specification is the Go code
 * of gpubpf/devmap (Image.Lookup/Update/Delete/RingbufOutput, which the
 * interpreter gpubpf/ptxinterp runs): for any sequence of calls from
 * one thread these functions leave the same bytes behind.
 *
 *   ARRAY     entry = [u64 seq][value round8]; key is a u32 index.
 *             lookup: &value, or 0 if the index is out of range.
 *             update: index out of range -E2BIG; BPF_NOEXIST -EEXIST (every
 *             element of an array exists); BPF_ANY and BPF_EXIST write.
 *             A value of <= 8 bytes is written with one 64-bit atomic
 *             exchange of its (zero-padded) word; a larger one under the
 *             seq word: the writer takes it odd with a CAS, copies, fences
 *             and makes it even again.
 *             delete: -EINVAL.
 *   HASH      bucket = [u32 state][u32 hash][key round8][value round8],
 *             nbuckets a power of two.  hash = FNV-1a 32 over the key bytes,
 *             stored in the bucket; the probe sequence starts at
 *             hash & (nbuckets-1) and is linear.  state: 0 empty, 1 being
 *             written, 2 live, 3 deleted.  A walk ends at an empty bucket
 *             and waits for one being written (its key may be ours).  A
 *             missing key claims the first deleted or empty bucket of its
 *             sequence with a CAS to 1, writes hash, key and value, fences
 *             and publishes 2; no such bucket: -E2BIG.  An existing key's
 *             value is rewritten as for arrays (one exchange for <= 8
 *             bytes; larger values take the bucket 2->1 and back).  update
 *             flags: BPF_NOEXIST on a live key -EEXIST, BPF_EXIST on a
 *             missing key -ENOENT.  delete: a live key goes 2->3; a missing
 *             key -ENOENT.  A u64 after the buckets counts live entries: a
 *             new key takes a place in it once it holds its bucket (state
 *             1), before writing it (atomic add; past max_entries: the
 *             place given back, the bucket back to its state before the
 *             claim, untouched, and one more walk: the key live now is
 *             rewritten, else -E2BIG, as the kernel refuses the
 *             (max_entries+1)th); a delete gives its place back.  So only
 *             a thread holding a bucket holds a place: racing inserters of
 *             one key do not take places that other keys then miss.  Two
 *             threads can insert one new key into two buckets when a delete
 *             makes an earlier bucket of the sequence free between their
 *             walks; so an inserter, once its bucket is live, looks along
 *             the sequence: with its key live earlier it deletes its own
 *             copy, and it deletes later copies up to the next empty bucket:
 *             the earliest copy stays (lookups find it first anyway).
 *   PER_WARP  slots x max_entries x [value round8]; the warp's slot is
 *             (%smid * 64 + %warpid) % nbuckets; lookup and update use the
 *             calling warp's copy of entry key (update as for arrays, the
 *             value copied plainly when larger than 8 bytes: the slot belongs
 *             to the warp).  delete: -EINVAL.
 *   RINGBUF   [u64 head][u64 dropped][max_entries bytes].  output reserves
 *             8 + round8(size) bytes by advancing head with a CAS loop; head
 *             never passes max_entries: a record that does not fit is not
 *             written, dropped is incremented and the call returns -EAGAIN
 *             (what the kernel's bpf_ringbuf_output returns when a
 *             reservation fails).  The record is [u32 len][u32 0][data
 *             round8], the padding zero; len is stored last, after a fence.
 *             Flags other than BPF_RB_NO_WAKEUP / BPF_RB_FORCE_WAKEUP
 *             -EINVAL.
 *
 * Flags other than BPF_ANY/BPF_NOEXIST/BPF_EXIST -EINVAL; a helper called on
 * a map type it does not serve -EINVAL (lookup returns 0).
 */
#include <gpuext_abi.h>

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned char u8;

/* Errno values as the kernel's helpers return them (negated). */
#define GX_ENOENT 2
#define GX_EAGAIN 11
#define GX_EEXIST 17
#define GX_EINVAL 22
#define GX_E2BIG 7

/* bpf_map_update_elem flags and bpf_ringbuf_output flags. */
#define GX_BPF_ANY 0
#define GX_BPF_NOEXIST 1
#define GX_BPF_EXIST 2
#define GX_BPF_RB_NO_WAKEUP 1
#define GX_BPF_RB_FORCE_WAKEUP 2

#define GX_HASH_EMPTY 0u
#define GX_HASH_BUSY 1u
#define GX_HASH_LIVE 2u
#define GX_HASH_DELETED 3u

/* The descriptor fields live in the first GPUEXT_DMAP_HDR_SIZE bytes; the
 * data starts right after them. */
static_assert(__builtin_offsetof(struct gpuext_dmap, data_size) + 8 == GPUEXT_DMAP_HDR_SIZE,
	      "struct gpuext_dmap: the fields the device reads must end at GPUEXT_DMAP_HDR_SIZE");

static __device__ __forceinline__ u64 gx_err(int e)
{
	return (u64)(long long)(-e);
}

static __device__ __forceinline__ u64 round8(u64 n)
{
	return (n + 7) & ~7ull;
}

static __device__ __forceinline__ const struct gpuext_dmap *gx_desc(u64 map)
{
	return (const struct gpuext_dmap *)map;
}

static __device__ __forceinline__ u8 *gx_data(u64 map)
{
	return (u8 *)map + GPUEXT_DMAP_HDR_SIZE;
}

/* Bytes are copied one at a time: keys and values are generic addresses of
 * any alignment (a probe's stack slots are not always 8-aligned). */
static __device__ __forceinline__ void gx_copy(u8 *dst, const u8 *src, u32 n)
{
	for (u32 i = 0; i < n; i++)
		dst[i] = src[i];
}

static __device__ __forceinline__ u64 gx_load_word(const u8 *src, u32 n)
{
	u64 w = 0;
	for (u32 i = 0; i < n && i < 8; i++)
		w |= (u64)src[i] << (8 * i);
	return w;
}

static __device__ __forceinline__ bool gx_key_equal(const u8 *a, const u8 *b, u32 n)
{
	for (u32 i = 0; i < n; i++)
		if (a[i] != b[i])
			return false;
	return true;
}

static __device__ __forceinline__ u32 gx_fnv1a32(const u8 *p, u32 n)
{
	u32 h = 2166136261u;
	for (u32 i = 0; i < n; i++) {
		h ^= p[i];
		h *= 16777619u;
	}
	return h;
}

static __device__ __forceinline__ u32 gx_read_u32(const u8 *key)
{
	return (u32)gx_load_word(key, 4);
}

/* Writes value_size bytes of src at dst: one 64-bit exchange for values of
 * up to 8 bytes (dst is 8-aligned), else a plain copy the caller guards. */
static __device__ __forceinline__ void gx_store_small(u8 *dst, const u8 *src, u32 value_size)
{
	atomicExch((u64 *)dst, gx_load_word(src, value_size));
}

/* Array entry update: [u64 seq][value]. */
static __device__ __forceinline__ void gx_array_write(u8 *entry, const u8 *src, u32 value_size)
{
	u8 *val = entry + 8;
	if (value_size <= 8) {
		gx_store_small(val, src, value_size);
		return;
	}
	u64 *seq = (u64 *)entry;
	u64 s;
	for (;;) {
		s = *(volatile u64 *)seq;
		if ((s & 1) == 0 && atomicCAS(seq, s, s + 1) == s)
			break;
	}
	__threadfence();
	gx_copy(val, src, value_size);
	__threadfence();
	atomicExch(seq, s + 2);
}

#ifdef GPUEXT_HELPERS_HOST_TEST
/* The host differential test (testdata/hostdiff) sets the special registers. */
extern u32 gx_test_smid, gx_test_warpid;
#endif

static __device__ __forceinline__ u32 gx_warp_slot(u32 nslots)
{
	u32 smid, warpid;
#ifdef GPUEXT_HELPERS_HOST_TEST
	smid = gx_test_smid;
	warpid = gx_test_warpid;
#else
	asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
	asm volatile("mov.u32 %0, %%warpid;" : "=r"(warpid));
#endif
	return (smid * 64u + warpid) % nslots;
}

static __device__ __forceinline__ u8 *gx_warp_entry(u64 map, u32 idx)
{
	const struct gpuext_dmap *d = gx_desc(map);
	u64 slot = gx_warp_slot(d->nbuckets);
	return gx_data(map) + (slot * d->max_entries + idx) * d->stride;
}

/* Hash bucket fields. */
static __device__ __forceinline__ u32 *gx_bucket_state(u8 *b)
{
	return (u32 *)b;
}

static __device__ __forceinline__ u8 *gx_bucket_key(u8 *b)
{
	return b + 8;
}

static __device__ __forceinline__ u8 *gx_bucket_value(u8 *b, u32 key_size)
{
	return b + 8 + round8(key_size);
}

static __device__ __forceinline__ u32 gx_wait_not_busy(u8 *b)
{
	u32 st;
	do {
		st = *(volatile u32 *)gx_bucket_state(b);
	} while (st == GX_HASH_BUSY);
	__threadfence();
	return st;
}

static __device__ __forceinline__ bool gx_bucket_has(u8 *b, u32 h32, const u8 *key, u32 key_size)
{
	return *(volatile u32 *)(b + 4) == h32 && gx_key_equal(gx_bucket_key(b), key, key_size);
}

/* The live-entry count after the buckets. */
static __device__ __forceinline__ unsigned long long *gx_hash_count(u64 map)
{
	const struct gpuext_dmap *d = gx_desc(map);
	return (unsigned long long *)(gx_data(map) + (u64)d->nbuckets * d->stride);
}

/*
 * After claiming (and publishing) the bucket at sequence position pos for
 * key: two inserters of one key can hold two buckets, when a delete freed an
 * earlier bucket between their walks. The earliest copy stays: if the key is
 * live earlier in the sequence, this copy is deleted; later copies up to the
 * first empty bucket are deleted. Each inserter publishes before it looks
 * (sequentially consistent atomics), so of two racing inserters at least one
 * sees the other's bucket. (Buckets before pos were not empty at the walk,
 * and a bucket never becomes empty again.)
 */
static __device__ void gx_hash_dedup(u64 map, u32 h32, u32 pos, const u8 *key)
{
	const struct gpuext_dmap *d = gx_desc(map);
	u32 n = d->nbuckets, mask = n - 1, ks = d->key_size;
	u8 *data = gx_data(map);
	u8 *mine = data + (u64)((h32 + pos) & mask) * d->stride;
	for (u32 i = 0; i < n; i++) {
		u8 *b = data + (u64)((h32 + i) & mask) * d->stride;
		u32 st;
		if (i == pos)
			continue;
		st = gx_wait_not_busy(b);
		if (st == GX_HASH_EMPTY && i > pos)
			return;
		if (st != GX_HASH_LIVE || !gx_bucket_has(b, h32, key, ks))
			continue;
		/* an earlier copy: ours goes (unless someone deleted it already); a later one: it goes */
		if (atomicCAS(gx_bucket_state(i < pos ? mine : b), GX_HASH_LIVE, GX_HASH_DELETED) == GX_HASH_LIVE)
			atomicAdd(gx_hash_count(map), ~0ull);
		if (i < pos)
			return;
	}
}

static __device__ u64 gx_hash_lookup(u64 map, const u8 *key)
{
	const struct gpuext_dmap *d = gx_desc(map);
	u32 n = d->nbuckets, mask = n - 1, ks = d->key_size;
	u32 h32 = gx_fnv1a32(key, ks);
	u8 *data = gx_data(map);
	for (u32 i = 0; i < n; i++) {
		u8 *b = data + (u64)((h32 + i) & mask) * d->stride;
		u32 st = gx_wait_not_busy(b);
		if (st == GX_HASH_EMPTY)
			return 0;
		if (st == GX_HASH_LIVE && gx_bucket_has(b, h32, key, ks))
			return (u64)gx_bucket_value(b, ks);
	}
	return 0;
}

/* Rewrites the value of a live bucket that holds the key: 0, or 1 when the
 * bucket changed under us (look at it again). */
static __device__ __forceinline__ int gx_hash_rewrite(u8 *b, const u8 *value, u32 ks, u32 vs)
{
	if (vs <= 8) {
		gx_store_small(gx_bucket_value(b, ks), value, vs);
		return 0;
	}
	if (atomicCAS(gx_bucket_state(b), GX_HASH_LIVE, GX_HASH_BUSY) != GX_HASH_LIVE)
		return 1;
	__threadfence();
	gx_copy(gx_bucket_value(b, ks), value, vs);
	__threadfence();
	atomicExch(gx_bucket_state(b), GX_HASH_LIVE);
	return 0;
}

/*
 * Claims bucket b (state from -> busy) for a new key and only then takes a
 * place in the live count: 0 (the bucket is live with key and value), 1
 * when another thread claimed the bucket first (nothing taken), 2 when the
 * table is full (the place given back, the bucket back to from, untouched).
 *
 * The order matters under a storm of updates of a few keys: taking the
 * place before the claim let every racing inserter of one key hold a place
 * until its claim failed, so with max_entries keys in flight the count
 * passed max_entries and inserters of other keys got -E2BIG (on the GPU,
 * all 32 lanes of a warp updating their block's key took 32 places at
 * once). A place is now held only by the one thread that holds a bucket for
 * a key, so the count passes max_entries only when more new keys than
 * that are inserted at once, as the kernel refuses them. A bucket taken
 * back from busy to empty is safe for walkers: each waits out a busy bucket
 * and reads what it became.
 */
static __device__ __forceinline__ int gx_hash_claim(u64 map, u8 *b, u32 from, u32 h32, const u8 *key,
						     const u8 *value, u32 ks, u32 vs, u64 max_entries)
{
	if (atomicCAS(gx_bucket_state(b), from, GX_HASH_BUSY) != from)
		return 1;
	if (atomicAdd(gx_hash_count(map), 1ull) >= max_entries) {
		atomicAdd(gx_hash_count(map), ~0ull);
		atomicExch(gx_bucket_state(b), from);
		return 2;
	}
	*(volatile u32 *)(b + 4) = h32;
	gx_copy(gx_bucket_key(b), key, ks);
	gx_copy(gx_bucket_value(b, ks), value, vs);
	__threadfence();
	atomicExch(gx_bucket_state(b), GX_HASH_LIVE);
	return 0;
}

/*
 * Where a host stress test (testdata/hoststress) makes the thread yield:
 * between a walk and its claim, the window in which another thread's delete
 * or insert changes the chain. Nothing on the device.
 */
#ifndef GX_TEST_RACE_POINT
#define GX_TEST_RACE_POINT() \
	do {                   \
	} while (0)
#endif

static __device__ u64 gx_hash_update(u64 map, const u8 *key, const u8 *value, u64 flags)
{
	const struct gpuext_dmap *d = gx_desc(map);
	u32 n = d->nbuckets, mask = n - 1, ks = d->key_size, vs = d->value_size;
	u32 h32 = gx_fnv1a32(key, ks);
	u8 *data = gx_data(map);
	int full = 0; /* the table was full at a claim: a walk that finds no key ends in -E2BIG */
	for (;;) {
		u8 *free_b = 0; /* first deleted (or the empty) bucket of the sequence */
		u32 free_st = 0, free_pos = 0;
		int again = 0;
		u32 i;
		for (i = 0; i < n && !again; i++) {
			u8 *b = data + (u64)((h32 + i) & mask) * d->stride;
			u32 st = gx_wait_not_busy(b);
			if (st == GX_HASH_LIVE) {
				if (!gx_bucket_has(b, h32, key, ks))
					continue;
				if (flags == GX_BPF_NOEXIST)
					return gx_err(GX_EEXIST);
				if (gx_hash_rewrite(b, value, ks, vs) == 0)
					return 0;
				again = 1; /* rewritten or deleted meanwhile */
				break;
			}
			if (st == GX_HASH_DELETED) {
				if (!free_b) {
					free_b = b;
					free_st = GX_HASH_DELETED;
					free_pos = i;
				}
				continue;
			}
			/* empty: the key is not in the table */
			if (!free_b) {
				free_b = b;
				free_st = GX_HASH_EMPTY;
				free_pos = i;
			}
			break;
		}
		if (again)
			continue;
		if (flags == GX_BPF_EXIST)
			return gx_err(GX_ENOENT);
		if (!free_b || full)
			return gx_err(GX_E2BIG);
		GX_TEST_RACE_POINT();
		switch (gx_hash_claim(map, free_b, free_st, h32, key, value, ks, vs, d->max_entries)) {
		case 0:
			gx_hash_dedup(map, h32, free_pos, key);
			return 0;
		case 2:
			/* Full: unless an inserter racing with a delete put this very
			 * key in meanwhile (then it is rewritten), -E2BIG. */
			full = 1;
			break;
		}
		/* Another thread took the bucket, perhaps for this very key: walk again. */
	}
}

static __device__ u64 gx_hash_delete(u64 map, const u8 *key)
{
	const struct gpuext_dmap *d = gx_desc(map);
	u32 n = d->nbuckets, mask = n - 1, ks = d->key_size;
	u32 h32 = gx_fnv1a32(key, ks);
	u8 *data = gx_data(map);
	for (u32 i = 0; i < n; i++) {
		u8 *b = data + (u64)((h32 + i) & mask) * d->stride;
		for (;;) {
			u32 st = gx_wait_not_busy(b);
			if (st == GX_HASH_EMPTY)
				return gx_err(GX_ENOENT);
			if (st == GX_HASH_DELETED || !gx_bucket_has(b, h32, key, ks))
				break;
			if (atomicCAS(gx_bucket_state(b), GX_HASH_LIVE, GX_HASH_DELETED) == GX_HASH_LIVE) {
				atomicAdd(gx_hash_count(map), ~0ull);
				return 0;
			}
			/* changed under us: look again */
		}
	}
	return gx_err(GX_ENOENT);
}

/* (map, key) -> generic address of the value, or 0. */
extern "C" __device__ __noinline__ u64 __gpuext_h_map_lookup_elem(u64 map, u64 key)
{
	const struct gpuext_dmap *d = gx_desc(map);
	const u8 *k = (const u8 *)key;
	u32 idx;
	switch (d->type) {
	case GPUEXT_DMAP_ARRAY:
		idx = gx_read_u32(k);
		if (idx >= d->max_entries)
			return 0;
		return (u64)(gx_data(map) + (u64)idx * d->stride + 8);
	case GPUEXT_DMAP_HASH:
		return gx_hash_lookup(map, k);
	case GPUEXT_DMAP_PER_WARP:
		idx = gx_read_u32(k);
		if (idx >= d->max_entries)
			return 0;
		return (u64)gx_warp_entry(map, idx);
	}
	return 0;
}

/* (map, key, value, flags) -> 0 or -errno. */
extern "C" __device__ __noinline__ u64 __gpuext_h_map_update_elem(u64 map, u64 key, u64 value, u64 flags)
{
	const struct gpuext_dmap *d = gx_desc(map);
	const u8 *k = (const u8 *)key, *v = (const u8 *)value;
	u32 idx;
	if (flags > GX_BPF_EXIST)
		return gx_err(GX_EINVAL);
	switch (d->type) {
	case GPUEXT_DMAP_ARRAY:
		idx = gx_read_u32(k);
		if (idx >= d->max_entries)
			return gx_err(GX_E2BIG);
		if (flags == GX_BPF_NOEXIST)
			return gx_err(GX_EEXIST);
		gx_array_write(gx_data(map) + (u64)idx * d->stride, v, d->value_size);
		return 0;
	case GPUEXT_DMAP_HASH:
		return gx_hash_update(map, k, v, flags);
	case GPUEXT_DMAP_PER_WARP: {
		idx = gx_read_u32(k);
		if (idx >= d->max_entries)
			return gx_err(GX_E2BIG);
		if (flags == GX_BPF_NOEXIST)
			return gx_err(GX_EEXIST);
		u8 *e = gx_warp_entry(map, idx);
		if (d->value_size <= 8)
			gx_store_small(e, v, d->value_size);
		else
			gx_copy(e, v, d->value_size);
		return 0;
	}
	}
	return gx_err(GX_EINVAL);
}

/* (map, key) -> 0 or -errno. */
extern "C" __device__ __noinline__ u64 __gpuext_h_map_delete_elem(u64 map, u64 key)
{
	const struct gpuext_dmap *d = gx_desc(map);
	if (d->type == GPUEXT_DMAP_HASH)
		return gx_hash_delete(map, (const u8 *)key);
	return gx_err(GX_EINVAL);
}

/* (map, data, size, flags) -> 0 or -errno. */
extern "C" __device__ __noinline__ u64 __gpuext_h_ringbuf_output(u64 map, u64 data, u64 size, u64 flags)
{
	const struct gpuext_dmap *d = gx_desc(map);
	if (d->type != GPUEXT_DMAP_RINGBUF)
		return gx_err(GX_EINVAL);
	if (flags & ~(u64)(GX_BPF_RB_NO_WAKEUP | GX_BPF_RB_FORCE_WAKEUP))
		return gx_err(GX_EINVAL);
	u8 *base = gx_data(map);
	u64 *head = (u64 *)base, *dropped = (u64 *)(base + 8);
	u8 *buf = base + 16;
	u64 cap = d->max_entries;
	u64 need = size > cap ? cap + 1 : 8 + round8(size);
	u64 pos = *(volatile u64 *)head;
	for (;;) {
		if (pos + need > cap) {
			atomicAdd(dropped, 1ull);
			return gx_err(GX_EAGAIN);
		}
		u64 seen = atomicCAS(head, pos, pos + need);
		if (seen == pos)
			break;
		pos = seen;
	}
	u8 *rec = buf + pos;
	*(u32 *)(rec + 4) = 0;
	gx_copy(rec + 8, (const u8 *)data, (u32)size);
	__threadfence();
	atomicExch((u32 *)rec, (u32)size);
	return 0;
}
