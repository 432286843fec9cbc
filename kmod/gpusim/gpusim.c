// SPDX-License-Identifier: GPL-2.0
/*
 * gpusim.c - a simulated GPU driver that calls the gpuext call sites.
 *
 * It keeps, per GPU context, a set of resident root chunks (in chunk id
 * order, the order a driver walks its chunk array) with arrival and access
 * clocks, and runs evictions through gpuext_evict_prepare().  Its stock
 * eviction order is LRU (least recent access first).  The debugfs interface
 * is documented in README.md next to this file.
 */
#include <linux/debugfs.h>
#include <linux/kernel.h>
#include <linux/list.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/slab.h>
#include <linux/sort.h>
#include <linux/string.h>
#include <linux/uaccess.h>

#include "gpuext_abi.h"
#include "gpuext_core.h"

#define GPUSIM_NAME_LEN 32
#define GPUSIM_RESULT_LEN 1024

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
};

static DEFINE_MUTEX(gpusim_lock); /* contexts, their chunks and the clock */
static LIST_HEAD(gpusim_ctxs);
static u64 gpusim_clock;
static struct dentry *gpusim_debugfs;

static struct gpusim_ctx *gpusim_find(const char *name)
{
	struct gpusim_ctx *c;

	list_for_each_entry(c, &gpusim_ctxs, node)
		if (!strcmp(c->name, name))
			return c;
	return NULL;
}

#include "runlist.c" /* TSG runlist through the gpuext sched call sites */

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

/* ---- per-context files --------------------------------------------- */

static ssize_t gpusim_ctx_ctl_write(struct file *f, const char __user *ubuf, size_t len, loff_t *ppos)
{
	struct gpusim_ctx *c = f->f_inode->i_private;
	char buf[64], cmd[16];
	u64 id = 0;
	int n, err;

	if (len >= sizeof(buf))
		return -E2BIG;
	if (copy_from_user(buf, ubuf, len))
		return -EFAULT;
	buf[len] = 0;
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

static int gpusim_create(const char *name)
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
	c->dir = debugfs_create_dir(c->name, gpusim_debugfs);
	debugfs_create_file("ctl", 0200, c->dir, c, &gpusim_ctx_ctl_fops);
	debugfs_create_file("evict", 0400, c->dir, c, &gpusim_evict_fops);
	debugfs_create_file("info", 0400, c->dir, c, &gpusim_info_fops);
	list_add_tail(&c->node, &gpusim_ctxs);
	return 0;
}

static void gpusim_destroy_ctx(struct gpusim_ctx *c)
{
	list_del(&c->node);
	gpusim_runlist_drop_ctx(c);
	debugfs_remove_recursive(c->dir); /* waits for open files to drain */
	gpuext_ctx_destroy(c->gctx);
	kfree(c);
}

static ssize_t gpusim_ctl_write(struct file *f, const char __user *ubuf, size_t len, loff_t *ppos)
{
	char buf[64], cmd[16], name[GPUSIM_NAME_LEN];
	struct gpusim_ctx *c;
	int err;

	if (len >= sizeof(buf))
		return -E2BIG;
	if (copy_from_user(buf, ubuf, len))
		return -EFAULT;
	buf[len] = 0;
	if (sscanf(buf, "%15s %31s", cmd, name) != 2)
		return -EINVAL;
	mutex_lock(&gpusim_lock);
	if (!strcmp(cmd, "create")) {
		err = gpusim_create(name);
	} else if (!strcmp(cmd, "destroy")) {
		c = gpusim_find(name);
		err = c ? 0 : -ENOENT;
		if (c)
			gpusim_destroy_ctx(c);
	} else {
		err = -EINVAL;
	}
	mutex_unlock(&gpusim_lock);
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
	gpusim_runlist_init(gpusim_debugfs);
	pr_info("gpusim: loaded\n");
	return 0;
}

static void __exit gpusim_exit(void)
{
	struct gpusim_ctx *c, *tmp;

	mutex_lock(&gpusim_lock);
	list_for_each_entry_safe(c, tmp, &gpusim_ctxs, node)
		gpusim_destroy_ctx(c);
	mutex_unlock(&gpusim_lock);
	debugfs_remove_recursive(gpusim_debugfs);
}

module_init(gpusim_init);
module_exit(gpusim_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("gpusim: a simulated GPU driver for the gpuext call sites");
