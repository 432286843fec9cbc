// SPDX-License-Identifier: GPL-2.0
/*
 * runlist.c - gpusim's TSG runlist: TSGs of GPU contexts, each with the
 * timeslice and interleave level that gpuext_tsg_init() settled, admitted
 * or refused by gpuext_tsg_bind().  gpusim.c includes this file (it shares
 * gpusim_lock and the context list).
 *
 * debugfs /sys/kernel/debug/gpusim/runlist (see README.md):
 *   write "create TSG CTX"  new TSG of context CTX (-EPERM when bind refused;
 *                           the TSG stays listed as refused until destroyed)
 *   write "destroy TSG"
 *   write "run TSG"         TSG starts its timeslice on the engine now
 *   write "submit TSG"      TSG has work: gpuext_tsg_submit(); the TSG that
 *                           runs is preempted when the policy asked (the wait
 *                           is then GPUSIM_PREEMPT_US), else the submitter
 *                           waits out its timeslice; the submitter runs next
 *   read                    one line per TSG, then the runlist order
 */

#define GPUSIM_STOCK_TIMESLICE_US 1024
#define GPUSIM_STOCK_INTERLEAVE 2
#define GPUSIM_RUNLIST_BUF 4096
/* The modelled cost of a preemption: gpu_ext reports 312 us on its hardware. */
#define GPUSIM_PREEMPT_US 300

struct gpusim_tsg {
	struct list_head node;
	char name[GPUSIM_NAME_LEN];
	struct gpusim_ctx *ctx;
	struct gpuext_tsg_ctx t;        /* kept for the TSG's lifetime */
	char ops[GPUEXT_OPS_NAME_LEN];  /* ops that set the values, "" = stock */
	bool bound;
	u32 wait_us;    /* the last submit's wait for the engine */
	u32 submits;
	u32 preempted;  /* times this TSG was preempted */
};

static LIST_HEAD(gpusim_tsgs); /* under gpusim_lock, in creation order */
static struct gpusim_tsg *gpusim_running; /* on the engine, or NULL */

static struct gpusim_tsg *gpusim_tsg_find(const char *name)
{
	struct gpusim_tsg *g;

	list_for_each_entry(g, &gpusim_tsgs, node)
		if (!strcmp(g->name, name))
			return g;
	return NULL;
}

static void gpusim_tsg_free(struct gpusim_tsg *g)
{
	if (gpusim_running == g)
		gpusim_running = NULL;
	list_del(&g->node);
	gpuext_tsg_destroy(g->ctx->gctx, &g->t);
	kfree(g);
}

static int gpusim_tsg_create(const char *name, const char *ctx_name)
{
	struct gpusim_ctx *c = gpusim_find(ctx_name);
	struct gpusim_tsg *g;
	int ret;

	if (!c)
		return -ENOENT;
	if (!name[0] || gpusim_tsg_find(name))
		return -EEXIST;
	g = kzalloc(sizeof(*g), GFP_KERNEL);
	if (!g)
		return -ENOMEM;
	strscpy(g->name, name, sizeof(g->name));
	g->ctx = c;
	g->t.timeslice_us = GPUSIM_STOCK_TIMESLICE_US;
	g->t.interleave = GPUSIM_STOCK_INTERLEAVE;
	ret = gpuext_tsg_init(c->gctx, &g->t, g->ops);
	if (ret < 0) {
		kfree(g);
		return ret;
	}
	list_add_tail(&g->node, &gpusim_tsgs);
	ret = gpuext_tsg_bind(c->gctx, &g->t);
	g->bound = ret == 0;
	return ret;
}

/*
 * Work arrives for g.  The engine's TSG (another one) would run out its
 * timeslice first; the policy may ask to preempt it (tsg_submit), and the
 * driver preempts what the core accepted.  g runs next.
 */
static int gpusim_tsg_submit(struct gpusim_tsg *g)
{
	struct gpuext_tsg_submit_ctx sctx;
	struct gpusim_tsg *r = gpusim_running;
	bool preempt = false;
	int n, i;

	if (!g->bound)
		return -EPERM;
	n = gpuext_tsg_submit(g->ctx->gctx, &g->t, &sctx);
	if (n < 0)
		return n;
	for (i = 0; i < n && r; i++)
		if (sctx.preempt[i] == r->t.tsg_id)
			preempt = true;
	g->submits++;
	if (!r || r == g)
		g->wait_us = 0;
	else if (preempt)
		g->wait_us = GPUSIM_PREEMPT_US;
	else
		g->wait_us = r->t.timeslice_us;
	if (r && r != g && preempt)
		r->preempted++;
	gpusim_running = g;
	return 0;
}

/* gpusim_destroy_ctx(): the context's TSGs go with it. */
static void gpusim_runlist_drop_ctx(struct gpusim_ctx *c)
{
	struct gpusim_tsg *g, *tmp;

	list_for_each_entry_safe(g, tmp, &gpusim_tsgs, node)
		if (g->ctx == c)
			gpusim_tsg_free(g);
}

static ssize_t gpusim_runlist_write(struct file *f, const char __user *ubuf, size_t len, loff_t *ppos)
{
	char buf[96], cmd[16], name[GPUSIM_NAME_LEN], ctx[GPUSIM_NAME_LEN];
	struct gpusim_tsg *g;
	int n, err;

	err = gpusim_read_cmd(buf, sizeof(buf), ubuf, len);
	if (err)
		return err;
	n = sscanf(buf, "%15s %31s %31s", cmd, name, ctx);
	mutex_lock(&gpusim_lock);
	if (n == 3 && !strcmp(cmd, "create")) {
		err = gpusim_tsg_create(name, ctx);
	} else if (n == 2 && (!strcmp(cmd, "run") || !strcmp(cmd, "submit"))) {
		g = gpusim_tsg_find(name);
		err = !g ? -ENOENT : !g->bound ? -EPERM : 0;
		if (!err && cmd[0] == 'r')
			gpusim_running = g;
		else if (!err)
			err = gpusim_tsg_submit(g);
	} else if (n == 2 && !strcmp(cmd, "destroy")) {
		g = gpusim_tsg_find(name);
		err = g ? 0 : -ENOENT;
		if (g)
			gpusim_tsg_free(g);
	} else {
		err = -EINVAL;
	}
	mutex_unlock(&gpusim_lock);
	return err ?: len;
}

/*
 * The runlist as the scheduler walks it: each bound TSG gets interleave
 * consecutive slots of its timeslice per pass, in creation order.
 */
static ssize_t gpusim_runlist_read(struct file *f, char __user *ubuf, size_t len, loff_t *ppos)
{
	struct gpusim_tsg *g;
	size_t off = 0;
	ssize_t ret;
	char *buf;
	u32 i;

	buf = kzalloc(GPUSIM_RUNLIST_BUF, GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	mutex_lock(&gpusim_lock);
	list_for_each_entry(g, &gpusim_tsgs, node)
		off += scnprintf(buf + off, GPUSIM_RUNLIST_BUF - off,
				 "%s ctx %s tenant %u timeslice_us %u interleave %u ops %s bind %s "
				 "tsg_id %llu submits %u wait_us %u preempted %u\n",
				 g->name, g->ctx->name, g->t.tenant_id, g->t.timeslice_us,
				 g->t.interleave, g->ops[0] ? g->ops : "stock",
				 g->bound ? "admitted" : "refused", g->t.tsg_id, g->submits,
				 g->wait_us, g->preempted);
	off += scnprintf(buf + off, GPUSIM_RUNLIST_BUF - off, "order");
	list_for_each_entry(g, &gpusim_tsgs, node)
		for (i = 0; g->bound && i < g->t.interleave; i++)
			off += scnprintf(buf + off, GPUSIM_RUNLIST_BUF - off, " %s", g->name);
	off += scnprintf(buf + off, GPUSIM_RUNLIST_BUF - off, "\n");
	mutex_unlock(&gpusim_lock);
	ret = simple_read_from_buffer(ubuf, len, ppos, buf, off);
	kfree(buf);
	return ret;
}

static const struct file_operations gpusim_runlist_fops = {
	.owner = THIS_MODULE,
	.read = gpusim_runlist_read,
	.write = gpusim_runlist_write,
};

static void gpusim_runlist_init(struct dentry *dir)
{
	debugfs_create_file("runlist", 0600, dir, NULL, &gpusim_runlist_fops);
}
