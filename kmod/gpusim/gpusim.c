// SPDX-License-Identifier: GPL-2.0
/*
 * gpusim.c - a simulated GPU driver that calls the gpuext call sites.
 *
 * It keeps, per GPU context, a set of resident root chunks (in chunk id
 * order, the order a driver walks its chunk array) with arrival and access
 * clocks, and runs evictions through gpuext_evict_prepare().  Its stock
 * eviction order is LRU (least recent access first).
 *
 * The memory model: one device of N root chunks (2 MiB); each context has
 * VA blocks of 2 MiB (512 pages of 4 KiB), each backed by one root chunk
 * while any of its pages is resident.  A context replays a trace of page
 * touches; a touch of a non-resident page is a fault, serviced through
 * gpuext_prefetch() (stock: the tree-threshold rule), which may allocate a
 * chunk and, when the device is full, evict one through
 * gpuext_evict_prepare().  The debugfs interface is documented in README.md
 * next to this file.
 */
#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/kernel.h>
#include <linux/ktime.h>
#include <linux/list.h>
#include <linux/module.h>
#include <linux/math64.h>
#include <linux/mutex.h>
#include <linux/sched.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/sort.h>
#include <linux/string.h>
#include <linux/uaccess.h>

#include "gpuext_abi.h"
#include "gpuext_core.h"

#define GPUSIM_NAME_LEN 32
#define GPUSIM_RESULT_LEN 1024

#define GPUSIM_PAGES_PER_BLOCK 512  /* 2 MiB VA block of 4 KiB pages */
#define GPUSIM_MAX_BLOCKS 64        /* VA blocks per context (128 MiB) */
#define GPUSIM_EVICT_LOG 64         /* evicted VA blocks remembered per context */
#define GPUSIM_TREE_THRESHOLD 51    /* stock prefetch: percent of a region */
#define GPUSIM_DEFAULT_CHUNKS 16
#define GPUSIM_CHUNK_BYTES (2ULL << 20)
#define GPUSIM_TRACE_MAX (64 * 1024)
#define GPUSIM_SCAN_MAX (GPUSIM_MAX_BLOCKS * GPUSIM_PAGES_PER_BLOCK) /* touches per scan line */

/* A VA block of the memory model and the root chunk that backs it. */
struct gpusim_block {
	unsigned long resident[BITS_TO_LONGS(GPUSIM_PAGES_PER_BLOCK)];
	u32 nr_resident;  /* pages resident */
	bool backed;      /* holds a root chunk */
	u64 alloc_seq;    /* when the chunk was allocated (arrival) */
	u64 access_seq;   /* last touch */
	u64 access_count; /* touches while backed, the faulting one included (gpuext_abi.h) */
};

/* Per-context counters of the memory model. */
struct gpusim_mem_stats {
	u64 touches;
	u64 faults;
	u64 pages_in;
	u64 pages_out;
	u64 evictions;      /* chunks of this context evicted */
	u64 prefetched;     /* pages migrated in beyond the faulting page */
	u64 policy_faults;  /* faults whose region a policy chose */
	u64 policy_evicts;  /* evictions whose order a policy chose */
	u64 service_ns;     /* time spent servicing faults (hooks, eviction, migration) */
	u64 migrations;     /* bpf_gpuext_migrate_range calls the driver served */
	u64 migrated;       /* pages they made resident (no fault) */
	u64 node_calls;     /* prefetch_node hook calls */
	u64 node_taken;     /* nodes a policy took */
};

struct gpusim_chunk {
	u64 id;
	u64 alloc_seq;
	u64 access_seq;
	u64 access_count;
};

struct gpusim_ctx {
	struct list_head node;
	char name[GPUSIM_NAME_LEN];
	struct gpuext_ctx *gctx;
	struct dentry *dir;
	u32 nr_chunks;
	struct gpusim_chunk chunks[GPUEXT_EVICT_MAX_CANDIDATES]; /* sorted by id */
	u64 evictions;
	char result[GPUSIM_RESULT_LEN]; /* last eviction, as the evict file shows it */

	/* memory model */
	bool dead;      /* destroyed: no more migrations (gpusim_free_ctx follows) */
	u32 tenant_id;  /* as the core last resolved it (0: unregistered) */
	u32 nr_backed;  /* root chunks held */
	struct gpusim_mem_stats st;
	u32 nr_evicted; /* entries used in evicted[] (capped) */
	u32 evicted[GPUSIM_EVICT_LOG]; /* VA blocks in eviction order */
	struct gpusim_block blocks[GPUSIM_MAX_BLOCKS];
};

static DEFINE_MUTEX(gpusim_lock); /* contexts, their chunks and the clock */
static LIST_HEAD(gpusim_ctxs);
static u64 gpusim_clock;
static struct dentry *gpusim_debugfs;
/* debugfs migrate_delay_ms: each migration first sleeps this long (not holding gpusim_lock), for tests. */
static u32 gpusim_migrate_delay_ms;
static u32 gpusim_dev_chunks = GPUSIM_DEFAULT_CHUNKS; /* device memory in root chunks */
static u32 gpusim_dev_used;
static u64 gpusim_arbitrated; /* evictions whose context the system ops picked */

static struct gpusim_ctx *gpusim_find(const char *name)
{
	struct gpusim_ctx *c;

	list_for_each_entry(c, &gpusim_ctxs, node)
		if (!strcmp(c->name, name))
			return c;
	return NULL;
}

/*
 * gpusim_read_cmd() - a command written to one of gpusim's debugfs command
 * files (ctl, <ctx>/ctl, runlist, vidmem), copied into @buf of @size bytes
 * as a NUL-terminated line for sscanf: -E2BIG when it does not fit with its
 * terminator, -EFAULT when it cannot be read.
 */
static int gpusim_read_cmd(char *buf, size_t size, const char __user *ubuf, size_t len)
{
	if (len >= size)
		return -E2BIG;
	if (copy_from_user(buf, ubuf, len))
		return -EFAULT;
	buf[len] = 0;
	return 0;
}

#include "runlist.c" /* TSG runlist through the gpuext sched call sites */
#include "vidmem.c" /* video memory charged to the cgroup dmem controller */

static struct gpusim_chunk *gpusim_chunk(struct gpusim_ctx *c, u64 id)
{
	u32 i;

	for (i = 0; i < c->nr_chunks; i++)
		if (c->chunks[i].id == id)
			return &c->chunks[i];
	return NULL;
}

static int gpusim_alloc(struct gpusim_ctx *c, u64 id)
{
	u32 i;

	if (gpusim_chunk(c, id))
		return -EEXIST;
	if (c->nr_chunks == GPUEXT_EVICT_MAX_CANDIDATES)
		return -ENOSPC;
	for (i = c->nr_chunks; i > 0 && c->chunks[i - 1].id > id; i--)
		c->chunks[i] = c->chunks[i - 1];
	c->chunks[i] = (struct gpusim_chunk){
		.id = id, .alloc_seq = ++gpusim_clock, .access_seq = gpusim_clock,
	};
	c->nr_chunks++;
	return 0;
}

static int gpusim_touch(struct gpusim_ctx *c, u64 id)
{
	struct gpusim_chunk *ch = gpusim_chunk(c, id);

	if (!ch)
		return -ENOENT;
	ch->access_seq = ++gpusim_clock;
	ch->access_count++;
	return 0;
}

static int gpusim_cmp_lru(const void *a, const void *b)
{
	const struct gpuext_chunk_info *x = a, *y = b;

	return x->access_seq < y->access_seq ? -1 : x->access_seq > y->access_seq;
}

/* Run one eviction pass over every resident chunk; record the order. */
static int gpusim_evict(struct gpusim_ctx *c)
{
	struct gpuext_evict_ctx *e;
	char ops[GPUEXT_OPS_NAME_LEN];
	size_t off = 0;
	int ret;
	u32 i;

	e = kzalloc(sizeof(*e), GFP_KERNEL);
	if (!e)
		return -ENOMEM;
	e->nr_candidates = c->nr_chunks;
	for (i = 0; i < c->nr_chunks; i++)
		e->cand[i] = (struct gpuext_chunk_info){
			.chunk_id = c->chunks[i].id,
			.alloc_seq = c->chunks[i].alloc_seq,
			.access_seq = c->chunks[i].access_seq,
			.access_count = c->chunks[i].access_count,
		};
	ret = gpuext_evict_prepare(c->gctx, e, ops);
	if (ret < 0)
		goto out;
	if (ret == 0) /* stock: LRU */
		sort(e->cand, e->nr_candidates, sizeof(e->cand[0]), gpusim_cmp_lru, NULL);
	c->evictions++;
	off += scnprintf(c->result + off, GPUSIM_RESULT_LEN - off, "ops %s\norder",
			 ret == 1 ? ops : "stock");
	for (i = 0; i < e->nr_candidates; i++)
		off += scnprintf(c->result + off, GPUSIM_RESULT_LEN - off, " %llu", e->cand[i].chunk_id);
	scnprintf(c->result + off, GPUSIM_RESULT_LEN - off,
		  "\nrequests %u\nrefused %u\ncgroup %llu\ntenant %u\n",
		  e->requests, e->refused, e->cgroup_id, e->tenant_id);
	ret = 0;
out:
	kfree(e);
	return ret;
}

/* ---- memory model: faults, prefetch, chunks, eviction ------------------ */

static u32 gpusim_nr_ctxs(void)
{
	struct gpusim_ctx *c;
	u32 n = 0;

	list_for_each_entry(c, &gpusim_ctxs, node)
		n++;
	return n;
}

/*
 * Whose chunk leaves when the device is full: the faulting context's own
 * when it holds at least its fair share of the device, otherwise the
 * context holding the most chunks.  Which of that context's chunks leaves is
 * its tenant's eviction policy.
 */
static struct gpusim_ctx *gpusim_victim_ctx(struct gpusim_ctx *faulting)
{
	u32 share = max(gpusim_dev_chunks / max(gpusim_nr_ctxs(), 1u), 1u);
	struct gpusim_ctx *c, *best = NULL;

	if (faulting->nr_backed >= share)
		return faulting;
	list_for_each_entry(c, &gpusim_ctxs, node)
		if (c->nr_backed && (!best || c->nr_backed > best->nr_backed))
			best = c;
	return best;
}

static void gpusim_evict_block(struct gpusim_ctx *c, u32 b)
{
	struct gpusim_block *blk = &c->blocks[b];

	c->st.pages_out += blk->nr_resident;
	c->st.evictions++;
	if (c->nr_evicted < GPUSIM_EVICT_LOG)
		c->evicted[c->nr_evicted++] = b;
	memset(blk, 0, sizeof(*blk));
	c->nr_backed--;
	gpusim_dev_used--;
}

/*
 * Free one root chunk of victim context c.  The candidates are its backed
 * VA blocks in block order (at most GPUEXT_EVICT_MAX_CANDIDATES, lowest
 * blocks first); chunk_id is the VA block index.  Stock order: LRU.
 */
static int gpusim_evict_one(struct gpusim_ctx *c)
{
	struct gpuext_evict_ctx *e;
	u32 b, victim;
	int ret;

	e = kzalloc(sizeof(*e), GFP_KERNEL);
	if (!e)
		return -ENOMEM;
	for (b = 0; b < GPUSIM_MAX_BLOCKS && e->nr_candidates < GPUEXT_EVICT_MAX_CANDIDATES; b++) {
		struct gpusim_block *blk = &c->blocks[b];

		if (!blk->backed)
			continue;
		e->cand[e->nr_candidates++] = (struct gpuext_chunk_info){
			.chunk_id = b,
			.alloc_seq = blk->alloc_seq,
			.access_seq = blk->access_seq,
			.access_count = blk->access_count,
		};
	}
	if (!e->nr_candidates) {
		kfree(e);
		return -ENOSPC;
	}
	ret = gpuext_evict_prepare(c->gctx, e, NULL);
	if (ret < 0)
		goto out;
	c->tenant_id = e->tenant_id;
	if (ret == 1)
		c->st.policy_evicts++;
	else
		sort(e->cand, e->nr_candidates, sizeof(e->cand[0]), gpusim_cmp_lru, NULL);
	victim = e->cand[0].chunk_id;
	if (victim >= GPUSIM_MAX_BLOCKS || !c->blocks[victim].backed) {
		ret = -EIO; /* the core hands back only candidates it was given */
		goto out;
	}
	gpusim_evict_block(c, victim);
	ret = 0;
out:
	kfree(e);
	return ret;
}

/*
 * Which context gives up a chunk: the system ops' pick when one is set and
 * handles the call, otherwise the stock fair-share choice.
 */
static struct gpusim_ctx *gpusim_arbitrate(struct gpusim_ctx *faulting)
{
	struct gpusim_ctx *owners[GPUEXT_EVICT_MAX_CANDIDATES], *c;
	struct gpuext_arbitrate_ctx *a;
	u32 n = 0, b;
	int ret;

	a = kzalloc(sizeof(*a), GFP_KERNEL);
	if (!a)
		return gpusim_victim_ctx(faulting);
	list_for_each_entry(c, &gpusim_ctxs, node) {
		u64 oldest = U64_MAX;

		if (!c->nr_backed || n == GPUEXT_EVICT_MAX_CANDIDATES)
			continue;
		for (b = 0; b < GPUSIM_MAX_BLOCKS; b++)
			if (c->blocks[b].backed)
				oldest = min(oldest, c->blocks[b].access_seq);
		owners[n] = c;
		a->cand[n++] = (struct gpuext_evict_owner){
			.cgroup_id = gpuext_ctx_cgroup_id(c->gctx),
			.resident_bytes = (u64)c->nr_backed * GPUSIM_CHUNK_BYTES,
			.access_seq = oldest,
		};
	}
	a->nr_candidates = n;
	ret = gpuext_evict_arbitrate(a);
	c = ret == 1 ? owners[a->picked] : gpusim_victim_ctx(faulting);
	if (ret == 1)
		gpusim_arbitrated++;
	kfree(a);
	return c;
}

/* Back VA block b of c with a root chunk, evicting one when the device is full. */
static int gpusim_back_block(struct gpusim_ctx *c, u32 b)
{
	struct gpusim_block *blk = &c->blocks[b];
	int err;

	while (gpusim_dev_used >= gpusim_dev_chunks) {
		struct gpusim_ctx *v = gpusim_arbitrate(c);

		if (!v)
			return -ENOSPC;
		err = gpusim_evict_one(v);
		if (err)
			return err;
	}
	gpusim_dev_used++;
	c->nr_backed++;
	blk->backed = true;
	blk->alloc_seq = ++gpusim_clock;
	blk->access_count = 0;
	return 0;
}

static u32 gpusim_resident_in(const struct gpusim_block *blk, u32 first, u32 last)
{
	u32 n = 0, p;

	for (p = first; p <= last; p++)
		n += test_bit(p, blk->resident);
	return n;
}

/*
 * The stock prefetch: the tree-threshold rule.  Over the aligned regions of
 * 2, 4, ... 512 pages that hold the faulting page, take the largest one in
 * which the resident pages plus the faulting one exceed the threshold.
 */
static void gpusim_stock_region(struct gpusim_ctx *c, u32 b, u32 page, u32 *first, u32 *last)
{
	const struct gpusim_block *blk = &c->blocks[b];
	u32 size, level = 0;

	*first = *last = page;
	for (size = 2; size <= GPUSIM_PAGES_PER_BLOCK; size *= 2, level++) {
		u32 lo = page & ~(size - 1), hi = lo + size - 1;
		u32 n = gpusim_resident_in(blk, lo, hi) + 1;
		struct gpuext_prefetch_node_ctx nctx = {
			.va_block = b, .fault_page = page, .node_first = lo, .node_last = hi,
			.level = level, .counter = n, .region_first = 0,
			.region_last = GPUSIM_PAGES_PER_BLOCK - 1,
		};
		bool take = n * 100 > GPUSIM_TREE_THRESHOLD * size;

		/* The tenant's prefetch ops may decide each node (prefetch_node). */
		if (gpuext_prefetch_node(c->gctx, &nctx) == 1) {
			c->st.node_calls++;
			take = nctx.take;
			c->st.node_taken += take;
		}
		if (take) {
			*first = lo;
			*last = hi;
		}
	}
}

static void gpusim_block_notify(struct gpusim_ctx *c, u32 b, u32 page, bool activate)
{
	struct gpusim_block *blk = &c->blocks[b];
	struct gpuext_block_ctx bctx = {
		.chunk_id = b,
		.access_count = blk->access_count,
		.va_block = b,
		.page = page,
		.resident_pages = blk->nr_resident,
	};

	if (activate)
		gpuext_block_activate(c->gctx, &bctx);
	else
		gpuext_block_access(c->gctx, &bctx);
}

/*
 * One access of page `page` of VA block b: block_access when the block
 * holds a chunk, block_activate once a fault gave it one.
 */
static int gpusim_touch_page(struct gpusim_ctx *c, u32 b, u32 page)
{
	struct gpuext_prefetch_ctx pctx = {};
	struct gpusim_block *blk;
	u32 first, last, p, in = 0;
	bool activate;
	int ret;

	if (b >= GPUSIM_MAX_BLOCKS || page >= GPUSIM_PAGES_PER_BLOCK)
		return -ERANGE;
	blk = &c->blocks[b];
	c->st.touches++;
	activate = !blk->backed;
	if (!activate)
		gpusim_block_notify(c, b, page, false);
	if (!blk->backed || !test_bit(page, blk->resident)) {
		u64 t0 = ktime_get_ns();

		c->st.faults++;
		pctx.fault_page = page;
		pctx.va_block = b;
		pctx.region_first = 0;
		pctx.region_last = GPUSIM_PAGES_PER_BLOCK - 1;
		ret = gpuext_prefetch_resident(c->gctx, &pctx, blk->resident);
		if (ret < 0)
			return ret;
		c->tenant_id = pctx.tenant_id;
		if (ret == 1) {
			first = pctx.result_first;
			last = pctx.result_last;
			c->st.policy_faults++;
		} else {
			gpusim_stock_region(c, b, page, &first, &last);
		}
		if (!blk->backed) {
			ret = gpusim_back_block(c, b);
			if (ret)
				return ret;
		}
		for (p = first; p <= last; p++)
			if (!__test_and_set_bit(p, blk->resident))
				in++;
		blk->nr_resident += in;
		c->st.pages_in += in;
		c->st.prefetched += in - 1; /* the faulting page was not resident */
		c->st.service_ns += ktime_get_ns() - t0;
	}
	blk->access_seq = ++gpusim_clock;
	blk->access_count++;
	if (activate)
		gpusim_block_notify(c, b, page, true);
	return 0;
}

/*
 * bpf_gpuext_migrate_range for a context of gpusim (the core checked the
 * context, its tenant and the bounds): back VA block b and make pages
 * [first, last] resident without a fault, evicting when the device is full.
 */
static int gpusim_migrate(void *priv, u64 va_block, u32 first, u32 last)
{
	struct gpusim_ctx *c = priv;
	struct gpusim_block *blk;
	u32 p, in = 0;
	u32 delay = READ_ONCE(gpusim_migrate_delay_ms);
	int ret = 0;

	if (delay) /* a slow migration: the core's SRCU read section stays open */
		msleep(min(delay, 10000U));
	mutex_lock(&gpusim_lock);
	if (c->dead) {
		ret = -ENOENT;
		goto out;
	}
	blk = &c->blocks[va_block];
	if (!blk->backed) {
		ret = gpusim_back_block(c, va_block);
		if (ret)
			goto out;
	}
	for (p = first; p <= last; p++)
		if (!__test_and_set_bit(p, blk->resident))
			in++;
	blk->nr_resident += in;
	c->st.pages_in += in;
	c->st.migrations++;
	c->st.migrated += in;
	ret = in;
out:
	mutex_unlock(&gpusim_lock);
	return ret;
}

static const struct gpuext_migrate_ops gpusim_migrate_ops = {
	.migrate = gpusim_migrate,
	.nr_blocks = GPUSIM_MAX_BLOCKS,
	.pages_per_block = GPUSIM_PAGES_PER_BLOCK,
};

/*
 * Replay trace lines: "touch B P" (page P of VA block B) or
 * "scan B P N S" (N touches from page P of block B, S pages apart, crossing
 * block boundaries).  Caller holds gpusim_lock.
 */
static int gpusim_replay(struct gpusim_ctx *c, char *trace)
{
	char *line;

	while ((line = strsep(&trace, "\n")) != NULL) {
		u32 b, p, n, stride, i;
		char cmd[8];
		int k, err;

		line = strim(line);
		if (!*line || *line == '#')
			continue;
		k = sscanf(line, "%7s %u %u %u %u", cmd, &b, &p, &n, &stride);
		if (!strcmp(cmd, "touch") && k == 3) {
			err = gpusim_touch_page(c, b, p);
		} else if (!strcmp(cmd, "scan") && k == 5) {
			u64 g = (u64)b * GPUSIM_PAGES_PER_BLOCK + p;

			err = n > GPUSIM_SCAN_MAX ? -E2BIG : 0;
			for (i = 0; i < n && !err; i++, g += stride) {
				err = gpusim_touch_page(c, div_u64(g, GPUSIM_PAGES_PER_BLOCK),
							g % GPUSIM_PAGES_PER_BLOCK);
				if (!(i & 1023))
					cond_resched();
			}
		} else {
			err = -EINVAL;
		}
		if (err)
			return err;
	}
	return 0;
}

static ssize_t gpusim_trace_write(struct file *f, const char __user *ubuf, size_t len, loff_t *ppos)
{
	struct gpusim_ctx *c = f->f_inode->i_private;
	char *buf;
	int err;

	if (len > GPUSIM_TRACE_MAX)
		return -E2BIG;
	buf = memdup_user_nul(ubuf, len);
	if (IS_ERR(buf))
		return PTR_ERR(buf);
	mutex_lock(&gpusim_lock);
	err = gpusim_replay(c, buf);
	mutex_unlock(&gpusim_lock);
	kfree(buf);
	return err ?: len;
}

static const struct file_operations gpusim_trace_fops = {
	.owner = THIS_MODULE,
	.write = gpusim_trace_write,
};

static int gpusim_stats_show(struct seq_file *m, void *v)
{
	struct gpusim_ctx *c = m->private;
	u32 i;

	mutex_lock(&gpusim_lock);
	seq_printf(m, "cgroup %llu\ntenant %u\nchunks %u\n", gpuext_ctx_cgroup_id(c->gctx),
		   c->tenant_id, c->nr_backed);
	seq_printf(m, "touches %llu\nfaults %llu\npages_in %llu\npages_out %llu\nevictions %llu\n"
		   "prefetched %llu\npolicy_faults %llu\npolicy_evictions %llu\nservice_ns %llu\n"
		   "migrations %llu\nmigrated %llu\nnode_calls %llu\nnode_taken %llu\nctx_id %llu\nevicted",
		   c->st.touches, c->st.faults, c->st.pages_in, c->st.pages_out, c->st.evictions,
		   c->st.prefetched, c->st.policy_faults, c->st.policy_evicts, c->st.service_ns,
		   c->st.migrations, c->st.migrated, c->st.node_calls, c->st.node_taken,
		   gpuext_ctx_id(c->gctx));
	for (i = 0; i < c->nr_evicted; i++)
		seq_printf(m, " %u", c->evicted[i]);
	seq_puts(m, "\nresident");
	for (i = 0; i < GPUSIM_MAX_BLOCKS; i++)
		if (c->blocks[i].backed)
			seq_printf(m, " %u", i);
	seq_putc(m, '\n');
	mutex_unlock(&gpusim_lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(gpusim_stats);

/* Per tenant (as the core resolved it for each context): sums over its contexts. */
static int gpusim_tenants_show(struct seq_file *m, void *v)
{
	struct gpusim_ctx *c, *d;

	mutex_lock(&gpusim_lock);
	list_for_each_entry(c, &gpusim_ctxs, node) {
		struct gpusim_mem_stats sum = {};
		u32 n = 0, chunks = 0;
		bool first = true;

		list_for_each_entry(d, &gpusim_ctxs, node) {
			if (d->tenant_id != c->tenant_id)
				continue;
			if (d == c)
				break;
			first = false; /* printed with an earlier context */
		}
		if (!first)
			continue;
		list_for_each_entry(d, &gpusim_ctxs, node) {
			if (d->tenant_id != c->tenant_id)
				continue;
			n++;
			chunks += d->nr_backed;
			sum.touches += d->st.touches;
			sum.faults += d->st.faults;
			sum.pages_in += d->st.pages_in;
			sum.pages_out += d->st.pages_out;
			sum.evictions += d->st.evictions;
			sum.prefetched += d->st.prefetched;
			sum.service_ns += d->st.service_ns;
		}
		seq_printf(m, "tenant %u contexts %u chunks %u touches %llu faults %llu pages_in %llu "
			   "pages_out %llu evictions %llu prefetched %llu service_ns %llu\n", c->tenant_id,
			   n, chunks, sum.touches, sum.faults, sum.pages_in, sum.pages_out, sum.evictions,
			   sum.prefetched, sum.service_ns);
	}
	mutex_unlock(&gpusim_lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(gpusim_tenants);

static int gpusim_device_show(struct seq_file *m, void *v)
{
	mutex_lock(&gpusim_lock);
	seq_printf(m, "chunks %u\nused %u\narbitrated %llu\n", gpusim_dev_chunks, gpusim_dev_used,
		   gpusim_arbitrated);
	mutex_unlock(&gpusim_lock);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(gpusim_device);

/* ---- per-context files --------------------------------------------- */

static ssize_t gpusim_ctx_ctl_write(struct file *f, const char __user *ubuf, size_t len, loff_t *ppos)
{
	struct gpusim_ctx *c = f->f_inode->i_private;
	char buf[64], cmd[16];
	u64 id = 0;
	int n, err;

	err = gpusim_read_cmd(buf, sizeof(buf), ubuf, len);
	if (err)
		return err;
	n = sscanf(buf, "%15s %llu", cmd, &id);
	if (n < 1)
		return -EINVAL;
	mutex_lock(&gpusim_lock);
	if (!strcmp(cmd, "alloc") && n == 2)
		err = gpusim_alloc(c, id);
	else if (!strcmp(cmd, "touch") && n == 2)
		err = gpusim_touch(c, id);
	else if (!strcmp(cmd, "evict") && n == 1)
		err = gpusim_evict(c);
	else
		err = -EINVAL;
	mutex_unlock(&gpusim_lock);
	return err ?: len;
}

static const struct file_operations gpusim_ctx_ctl_fops = {
	.owner = THIS_MODULE,
	.write = gpusim_ctx_ctl_write,
};

static ssize_t gpusim_evict_read(struct file *f, char __user *ubuf, size_t len, loff_t *ppos)
{
	struct gpusim_ctx *c = f->f_inode->i_private;
	char *buf;
	ssize_t ret;

	buf = kmalloc(GPUSIM_RESULT_LEN, GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	mutex_lock(&gpusim_lock);
	memcpy(buf, c->result, GPUSIM_RESULT_LEN);
	mutex_unlock(&gpusim_lock);
	ret = simple_read_from_buffer(ubuf, len, ppos, buf, strnlen(buf, GPUSIM_RESULT_LEN));
	kfree(buf);
	return ret;
}

static const struct file_operations gpusim_evict_fops = {
	.owner = THIS_MODULE,
	.read = gpusim_evict_read,
};

static ssize_t gpusim_info_read(struct file *f, char __user *ubuf, size_t len, loff_t *ppos)
{
	struct gpusim_ctx *c = f->f_inode->i_private;
	char buf[128];
	int n;

	mutex_lock(&gpusim_lock);
	n = scnprintf(buf, sizeof(buf), "cgroup %llu\nchunks %u\nevictions %llu\n",
		      gpuext_ctx_cgroup_id(c->gctx), c->nr_chunks, c->evictions);
	mutex_unlock(&gpusim_lock);
	return simple_read_from_buffer(ubuf, len, ppos, buf, n);
}

static const struct file_operations gpusim_info_fops = {
	.owner = THIS_MODULE,
	.read = gpusim_info_read,
};

/* ---- top-level ctl --------------------------------------------------- */

/*
 * A context; with migrate false it has no migrate ops (like an RM channel
 * group), so bpf_gpuext_migrate_range refuses it and its destroy does not
 * wait for migrations.
 */
static int gpusim_create(const char *name, bool migrate)
{
	struct gpusim_ctx *c;

	if (!name[0] || strlen(name) >= GPUSIM_NAME_LEN || strchr(name, '/') || !strcmp(name, "ctl"))
		return -EINVAL;
	if (gpusim_find(name))
		return -EEXIST;
	c = kzalloc(sizeof(*c), GFP_KERNEL);
	if (!c)
		return -ENOMEM;
	c->gctx = gpuext_ctx_create(); /* attributed to the writer's cgroup */
	if (!c->gctx) {
		kfree(c);
		return -ENOMEM;
	}
	strscpy(c->name, name, sizeof(c->name));
	strscpy(c->result, "ops none\norder\n", sizeof(c->result));
	if (migrate)
		gpuext_ctx_set_migrate(c->gctx, &gpusim_migrate_ops, c);
	c->dir = debugfs_create_dir(c->name, gpusim_debugfs);
	debugfs_create_file("ctl", 0200, c->dir, c, &gpusim_ctx_ctl_fops);
	debugfs_create_file("evict", 0400, c->dir, c, &gpusim_evict_fops);
	debugfs_create_file("info", 0400, c->dir, c, &gpusim_info_fops);
	debugfs_create_file("trace", 0200, c->dir, c, &gpusim_trace_fops);
	debugfs_create_file("stats", 0400, c->dir, c, &gpusim_stats_fops);
	list_add_tail(&c->node, &gpusim_ctxs);
	return 0;
}

/*
 * Caller holds gpusim_lock; gpusim_free_ctx() after dropping it, since
 * gpuext_ctx_destroy() waits for migrations, which take gpusim_lock.
 */
static void gpusim_destroy_ctx(struct gpusim_ctx *c)
{
	gpusim_dev_used -= c->nr_backed; /* its chunks return to the device */
	c->dead = true;
	list_del(&c->node);
	gpusim_runlist_drop_ctx(c);
	debugfs_remove_recursive(c->dir); /* waits for open files to drain */
}

static void gpusim_free_ctx(struct gpusim_ctx *c)
{
	gpuext_ctx_destroy(c->gctx);
	kfree(c);
}

static ssize_t gpusim_ctl_write(struct file *f, const char __user *ubuf, size_t len, loff_t *ppos)
{
	char buf[64], cmd[24], name[GPUSIM_NAME_LEN]; /* cmd: "create-nomigrate" is 16 */
	struct gpusim_ctx *c = NULL;
	int err;

	err = gpusim_read_cmd(buf, sizeof(buf), ubuf, len);
	if (err)
		return err;
	if (sscanf(buf, "%23s %31s", cmd, name) != 2)
		return -EINVAL;
	mutex_lock(&gpusim_lock);
	if (!strcmp(cmd, "mem")) {
		u32 n;

		err = kstrtou32(name, 10, &n);
		if (!err && n == 0)
			err = -EINVAL;
		if (!err && n < gpusim_dev_used)
			err = -EBUSY; /* cannot shrink below what is in use */
		if (!err)
			gpusim_dev_chunks = n;
	} else if (!strcmp(cmd, "create")) {
		err = gpusim_create(name, true);
	} else if (!strcmp(cmd, "create-nomigrate")) {
		err = gpusim_create(name, false);
	} else if (!strcmp(cmd, "destroy")) {
		c = gpusim_find(name);
		err = c ? 0 : -ENOENT;
		if (c)
			gpusim_destroy_ctx(c);
	} else {
		err = -EINVAL;
	}
	mutex_unlock(&gpusim_lock);
	if (!strcmp(cmd, "destroy") && c)
		gpusim_free_ctx(c);
	return err ?: len;
}

static const struct file_operations gpusim_ctl_fops = {
	.owner = THIS_MODULE,
	.write = gpusim_ctl_write,
};

static int __init gpusim_init(void)
{
	gpusim_debugfs = debugfs_create_dir("gpusim", NULL);
	debugfs_create_file("ctl", 0200, gpusim_debugfs, NULL, &gpusim_ctl_fops);
	debugfs_create_file("device", 0400, gpusim_debugfs, NULL, &gpusim_device_fops);
	debugfs_create_file("tenants", 0400, gpusim_debugfs, NULL, &gpusim_tenants_fops);
	debugfs_create_u32("migrate_delay_ms", 0600, gpusim_debugfs, &gpusim_migrate_delay_ms);
	gpusim_runlist_init(gpusim_debugfs);
	gpusim_vidmem_init(gpusim_debugfs);
	pr_info("gpusim: loaded\n");
	return 0;
}

static void __exit gpusim_exit(void)
{
	struct gpusim_ctx *c, *tmp;

	LIST_HEAD(gone);

	mutex_lock(&gpusim_lock);
	list_for_each_entry_safe(c, tmp, &gpusim_ctxs, node) {
		gpusim_destroy_ctx(c);
		list_add(&c->node, &gone);
	}
	mutex_unlock(&gpusim_lock);
	list_for_each_entry_safe(c, tmp, &gone, node)
		gpusim_free_ctx(c);
	debugfs_remove_recursive(gpusim_debugfs);
	gpusim_vidmem_exit();
}

module_init(gpusim_init);
module_exit(gpusim_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("gpusim: a simulated GPU driver for the gpuext call sites");
