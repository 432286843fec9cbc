// SPDX-License-Identifier: GPL-2.0
/*
 * sched.c - the scheduling half of the gpuext core: the struct_ops type
 * gpuext_sched_ops (gpuext_ops.h), its request kfuncs and the TSG call
 * sites (gpuext_core.h).
 *
 * Built as part of gpuext.ko: gpuext.c includes this file, so it shares the
 * context struct, the registry lookup and the debugfs directory.
 *
 * Several sched ops may be attached; each claims priority classes, no two
 * share one, and a TSG runs the ops that claimed its tenant's class.  A
 * policy only asks for a timeslice and an interleave level; the core checks
 * the bounds (GPUEXT_TIMESLICE_*, GPUEXT_INTERLEAVE_*) and applies the
 * values only when no request of the call was refused.  No ops, a declined
 * or erring call, or a refused request leave the driver's stock values;
 * a bind hook that returns anything but GPUEXT_BIND_ADMIT/REFUSE admits.
 *
 * debugfs /sys/kernel/debug/gpuext/sched_ops: one line per attached ops,
 *   "<name> classes 0x<mask> calls N handled N errors N refused N denied N
 *   submits N preempts N" (calls: tsg_init calls; refused: refused requests;
 *   denied: refused binds; submits: tsg_submit calls; preempts: accepted
 *   preemption requests).
 */

struct gpuext_sched_entry {
	struct list_head node;
	struct gpuext_sched_ops *ops; /* the struct_ops map's kernel copy */
	char name[GPUEXT_OPS_NAME_LEN];
	u32 classes;
	atomic64_t calls;
	atomic64_t handled;
	atomic64_t errors;
	atomic64_t refused;
	atomic64_t denied;
	atomic64_t submits;  /* tsg_submit calls */
	atomic64_t preempts; /* preemptions the core accepted */
};

static LIST_HEAD(gpuext_sched_list); /* RCU readers, writers hold gpuext_sched_lock */
static DEFINE_MUTEX(gpuext_sched_lock);
static atomic64_t gpuext_tsg_seq;

/*
 * Every initialised TSG by tsg_id, so bpf_gpuext_tsg_preempt can check a
 * victim: that it lives and how urgent its tenant is.  RCU readers;
 * writers hold gpuext_tsgs_lock (a spinlock: drivers may init a TSG in
 * atomic context, so the entry is allocated GFP_NOWAIT and a TSG without
 * one simply cannot be preempted by a policy).
 */
#define GPUEXT_TSG_HASH_BITS 8
struct gpuext_tsg_ref {
	struct hlist_node node;
	u64 tsg_id;
	u64 cgroup_id;
	struct rcu_head rcu;
};
static struct hlist_head gpuext_tsgs[1 << GPUEXT_TSG_HASH_BITS];
static DEFINE_SPINLOCK(gpuext_tsgs_lock);

static struct hlist_head *gpuext_tsg_bucket(u64 tsg_id)
{
	return &gpuext_tsgs[hash_64(tsg_id, GPUEXT_TSG_HASH_BITS)];
}

/* Caller holds rcu_read_lock(). */
static struct gpuext_tsg_ref *gpuext_tsg_find_rcu(u64 tsg_id)
{
	struct gpuext_tsg_ref *r;

	hlist_for_each_entry_rcu(r, gpuext_tsg_bucket(tsg_id), node)
		if (r->tsg_id == tsg_id)
			return r;
	return NULL;
}

/* ---- ops registry ---------------------------------------------------- */

static int gpuext_sched_reg(void *kdata, struct bpf_link *link)
{
	struct gpuext_sched_ops *ops = kdata;
	struct gpuext_sched_entry *e, *o;
	int err = 0;

	e = kzalloc(sizeof(*e), GFP_KERNEL);
	if (!e)
		return -ENOMEM;
	e->ops = ops;
	e->classes = ops->classes;
	memcpy(e->name, ops->name, GPUEXT_OPS_NAME_LEN);

	mutex_lock(&gpuext_sched_lock);
	list_for_each_entry(o, &gpuext_sched_list, node) {
		if (!strncmp(o->name, e->name, GPUEXT_OPS_NAME_LEN) || (o->classes & e->classes)) {
			err = -EEXIST;
			break;
		}
	}
	if (!err) {
		list_add_tail_rcu(&e->node, &gpuext_sched_list);
		pr_info("gpuext: sched ops \"%s\" attached (classes 0x%x)\n", e->name, e->classes);
	}
	mutex_unlock(&gpuext_sched_lock);
	if (err)
		kfree(e);
	return err;
}

static void gpuext_sched_unreg(void *kdata, struct bpf_link *link)
{
	struct gpuext_sched_entry *e, *found = NULL;

	mutex_lock(&gpuext_sched_lock);
	list_for_each_entry(e, &gpuext_sched_list, node) {
		if (e->ops == kdata) {
			list_del_rcu(&e->node);
			found = e;
			break;
		}
	}
	mutex_unlock(&gpuext_sched_lock);
	if (!found)
		return;
	synchronize_rcu(); /* no call site still runs these ops */
	pr_info("gpuext: sched ops \"%s\" detached (calls %lld refused %lld denied %lld)\n",
		found->name, atomic64_read(&found->calls), atomic64_read(&found->refused),
		atomic64_read(&found->denied));
	kfree(found);
}

static int gpuext_sched_btf_init(struct btf *btf)
{
	return 0;
}

static int gpuext_sched_init_member(const struct btf_type *t, const struct btf_member *member,
				    void *kdata, const void *udata)
{
	const struct gpuext_sched_ops *uops = udata;
	struct gpuext_sched_ops *kops = kdata;
	u32 moff = __btf_member_bit_offset(t, member) / 8;

	switch (moff) {
	case offsetof(struct gpuext_sched_ops, classes):
		if (!uops->classes || (uops->classes & ~GPUEXT_SCHED_CLASS_ALL))
			return -EINVAL;
		kops->classes = uops->classes;
		return 1;
	case offsetof(struct gpuext_sched_ops, name):
		return gpuext_ops_name_copy(kops->name, uops->name);
	}
	return 0;
}

static int gpuext_stub_tsg_init(struct gpuext_tsg_ctx *ctx)
{
	return GPUEXT_RET_DEFAULT;
}

static int gpuext_stub_tsg_bind(struct gpuext_tsg_ctx *ctx)
{
	return GPUEXT_BIND_ADMIT;
}

static void gpuext_stub_tsg_destroy(struct gpuext_tsg_ctx *ctx)
{
}

static int gpuext_stub_tsg_submit(struct gpuext_tsg_submit_ctx *ctx)
{
	return GPUEXT_RET_DEFAULT;
}

static struct gpuext_sched_ops gpuext_sched_cfi_stubs = {
	.tsg_init = gpuext_stub_tsg_init,
	.tsg_bind = gpuext_stub_tsg_bind,
	.tsg_destroy = gpuext_stub_tsg_destroy,
	.tsg_submit = gpuext_stub_tsg_submit,
};

static struct bpf_struct_ops gpuext_sched_struct_ops = {
	.verifier_ops = &gpuext_verifier_ops,
	.init = gpuext_sched_btf_init,
	.init_member = gpuext_sched_init_member,
	.reg = gpuext_sched_reg,
	.unreg = gpuext_sched_unreg,
	.cfi_stubs = &gpuext_sched_cfi_stubs,
	.name = "gpuext_sched_ops",
	.owner = THIS_MODULE,
};

/* ---- request kfuncs -------------------------------------------------- */

__bpf_kfunc_start_defs();

/* Ask for a timeslice of us microseconds.  Refused outside the core's bounds. */
__bpf_kfunc int bpf_gpuext_tsg_set_timeslice(struct gpuext_tsg_ctx *ctx, u32 us)
{
	ctx->requests++;
	if (us < GPUEXT_TIMESLICE_MIN_US || us > GPUEXT_TIMESLICE_MAX_US) {
		ctx->refused++;
		return -ERANGE;
	}
	ctx->timeslice_us = us;
	return 0;
}

/* Ask for an interleave level.  Refused outside the core's bounds. */
__bpf_kfunc int bpf_gpuext_tsg_set_interleave(struct gpuext_tsg_ctx *ctx, u32 level)
{
	ctx->requests++;
	if (level < GPUEXT_INTERLEAVE_MIN || level > GPUEXT_INTERLEAVE_MAX) {
		ctx->refused++;
		return -ERANGE;
	}
	ctx->interleave = level;
	return 0;
}

/*
 * Ask the driver to preempt TSG tsg_id for the submitting TSG.  Refused:
 * the submitting TSG itself, a TSG the core does not know, one whose
 * tenant's class is not strictly less urgent than the submitter's (an
 * unregistered TSG counts as standard), and past GPUEXT_MAX_PREEMPT.
 */
__bpf_kfunc int bpf_gpuext_tsg_preempt(struct gpuext_tsg_submit_ctx *ctx, u64 tsg_id)
{
	struct gpuext_tenant_config cfg;
	struct gpuext_tsg_ref *r;
	u32 class = GPUEXT_PRIO_STANDARD;
	u64 cgid = 0;
	bool known;

	ctx->requests++;
	rcu_read_lock();
	r = gpuext_tsg_find_rcu(tsg_id);
	known = r != NULL;
	if (r)
		cgid = r->cgroup_id;
	if (known && gpuext_lookup_tenant(cgid, &cfg))
		class = cfg.priority_class;
	rcu_read_unlock();
	if (!known || tsg_id == ctx->tsg_id || class <= ctx->priority_class ||
	    ctx->nr_preempt >= GPUEXT_MAX_PREEMPT) {
		ctx->refused++;
		return -EPERM;
	}
	ctx->preempt[ctx->nr_preempt++] = tsg_id;
	return 0;
}

__bpf_kfunc_end_defs();

/* Listed in gpuext.c's gpuext_kfunc_ids: a module registers one kfunc set per program type. */

/* ---- call sites -------------------------------------------------------- */

/*
 * Caller holds rcu_read_lock().  Fills the core's part of tctx and returns
 * the ops that the tenant's priority class selects, or NULL (stock).
 */
static struct gpuext_sched_entry *gpuext_sched_select(struct gpuext_ctx *gctx,
						      struct gpuext_tsg_ctx *tctx)
{
	struct gpuext_tenant_config cfg;
	struct gpuext_sched_entry *e;

	tctx->cgroup_id = gctx->cgroup_id;
	tctx->tenant_id = 0;
	tctx->priority_class = 0;
	tctx->cfg_timeslice_us = 0;
	tctx->cfg_interleave = 0;
	tctx->requests = 0;
	tctx->refused = 0;
	if (!gpuext_lookup_tenant(gctx->cgroup_id, &cfg))
		return NULL;
	tctx->tenant_id = cfg.tenant_id;
	tctx->priority_class = cfg.priority_class;
	tctx->cfg_timeslice_us = cfg.timeslice_us;
	tctx->cfg_interleave = cfg.interleave;
	if (cfg.priority_class >= 32)
		return NULL;
	list_for_each_entry_rcu(e, &gpuext_sched_list, node)
		if (e->classes & GPUEXT_SCHED_CLASS(cfg.priority_class))
			return e;
	return NULL;
}

int gpuext_tsg_init(struct gpuext_ctx *gctx, struct gpuext_tsg_ctx *tctx,
		    char ops_name[GPUEXT_OPS_NAME_LEN])
{
	struct gpuext_sched_entry *e;
	struct gpuext_tsg_ref *ref;
	u32 stock_ts, stock_il;
	int ret = 0;

	if (!gctx || !tctx)
		return -EINVAL;
	if (ops_name)
		ops_name[0] = 0;
	stock_ts = tctx->timeslice_us;
	stock_il = tctx->interleave;
	tctx->tsg_id = atomic64_inc_return(&gpuext_tsg_seq);
	ref = kzalloc(sizeof(*ref), GFP_NOWAIT);
	if (ref) {
		ref->tsg_id = tctx->tsg_id;
		ref->cgroup_id = gctx->cgroup_id;
		spin_lock(&gpuext_tsgs_lock);
		hlist_add_head_rcu(&ref->node, gpuext_tsg_bucket(ref->tsg_id));
		spin_unlock(&gpuext_tsgs_lock);
	}

	rcu_read_lock();
	e = gpuext_sched_select(gctx, tctx);
	if (!e || !e->ops->tsg_init)
		goto out;
	atomic64_inc(&e->calls);
	ret = e->ops->tsg_init(tctx);
	if (tctx->refused)
		atomic64_add(tctx->refused, &e->refused);
	if (ret < 0)
		atomic64_inc(&e->errors);
	if (ret == GPUEXT_RET_HANDLED && !tctx->refused && tctx->requests) {
		atomic64_inc(&e->handled);
		if (ops_name)
			memcpy(ops_name, e->name, GPUEXT_OPS_NAME_LEN);
		ret = 1;
	} else {
		/* Declined, erred or asked for something refused: stock values. */
		tctx->timeslice_us = stock_ts;
		tctx->interleave = stock_il;
		ret = 0;
	}
out:
	rcu_read_unlock();
	return ret;
}
EXPORT_SYMBOL_GPL(gpuext_tsg_init);

int gpuext_tsg_bind(struct gpuext_ctx *gctx, struct gpuext_tsg_ctx *tctx)
{
	struct gpuext_tsg_ctx snap;
	struct gpuext_sched_entry *e;
	int ret = 0, r;

	if (!gctx || !tctx)
		return -EINVAL;
	/* The policy sees a copy: the applied values cannot change at bind. */
	snap = *tctx;
	rcu_read_lock();
	e = gpuext_sched_select(gctx, &snap);
	if (!e || !e->ops->tsg_bind)
		goto out;
	r = e->ops->tsg_bind(&snap);
	if (r == GPUEXT_BIND_REFUSE) {
		atomic64_inc(&e->denied);
		ret = -EPERM;
	} else if (r != GPUEXT_BIND_ADMIT) {
		atomic64_inc(&e->errors); /* not a bind answer: admit (stock) */
	}
out:
	rcu_read_unlock();
	return ret;
}
EXPORT_SYMBOL_GPL(gpuext_tsg_bind);

void gpuext_tsg_destroy(struct gpuext_ctx *gctx, struct gpuext_tsg_ctx *tctx)
{
	struct gpuext_sched_entry *e;
	struct gpuext_tsg_ctx snap;
	struct gpuext_tsg_ref *ref;

	if (!gctx || !tctx)
		return;
	spin_lock(&gpuext_tsgs_lock);
	hlist_for_each_entry(ref, gpuext_tsg_bucket(tctx->tsg_id), node) {
		if (ref->tsg_id == tctx->tsg_id) {
			hlist_del_rcu(&ref->node);
			kfree_rcu(ref, rcu);
			break;
		}
	}
	spin_unlock(&gpuext_tsgs_lock);
	/*
	 * Every attached ops hears of the end of every TSG: the tenant's class
	 * or registration may have changed since bind, and the ops that
	 * counted the TSG then must still release it.  Policies key their
	 * per-TSG state by tsg_id, so a TSG they never saw is a no-op.
	 */
	rcu_read_lock();
	list_for_each_entry_rcu(e, &gpuext_sched_list, node) {
		if (!e->ops->tsg_destroy)
			continue;
		snap = *tctx;
		gpuext_sched_select(gctx, &snap);
		e->ops->tsg_destroy(&snap);
	}
	rcu_read_unlock();
}
EXPORT_SYMBOL_GPL(gpuext_tsg_destroy);

int gpuext_tsg_submit(struct gpuext_ctx *gctx, struct gpuext_tsg_ctx *tctx,
		      struct gpuext_tsg_submit_ctx *sctx)
{
	struct gpuext_sched_entry *e;
	struct gpuext_tsg_ctx snap;
	int ret = 0;

	if (!gctx || !tctx || !sctx)
		return -EINVAL;
	memset(sctx, 0, sizeof(*sctx));
	snap = *tctx;
	rcu_read_lock();
	e = gpuext_sched_select(gctx, &snap);
	sctx->cgroup_id = snap.cgroup_id;
	sctx->tsg_id = tctx->tsg_id;
	sctx->tenant_id = snap.tenant_id;
	sctx->priority_class = snap.tenant_id ? snap.priority_class : GPUEXT_PRIO_STANDARD;
	if (!e || !e->ops->tsg_submit)
		goto out;
	atomic64_inc(&e->submits);
	ret = e->ops->tsg_submit(sctx);
	if (sctx->refused)
		atomic64_add(sctx->refused, &e->refused);
	if (ret < 0)
		atomic64_inc(&e->errors);
	if (ret == GPUEXT_RET_HANDLED && !sctx->refused) {
		atomic64_add(sctx->nr_preempt, &e->preempts);
		ret = sctx->nr_preempt;
	} else {
		sctx->nr_preempt = 0;
		ret = 0;
	}
out:
	rcu_read_unlock();
	return ret;
}
EXPORT_SYMBOL_GPL(gpuext_tsg_submit);

/* ---- debugfs and module hooks ------------------------------------------ */

static int gpuext_sched_ops_show(struct seq_file *m, void *v)
{
	struct gpuext_sched_entry *e;

	rcu_read_lock();
	list_for_each_entry_rcu(e, &gpuext_sched_list, node)
		seq_printf(m, "%s classes 0x%x calls %lld handled %lld errors %lld refused %lld denied %lld "
			   "submits %lld preempts %lld\n",
			   e->name, e->classes, atomic64_read(&e->calls), atomic64_read(&e->handled),
			   atomic64_read(&e->errors), atomic64_read(&e->refused),
			   atomic64_read(&e->denied), atomic64_read(&e->submits),
			   atomic64_read(&e->preempts));
	rcu_read_unlock();
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(gpuext_sched_ops);

/* Called from gpuext_init() after the memory struct_ops are registered. */
static int gpuext_sched_register(void)
{
	int err;

	err = register_bpf_struct_ops(&gpuext_sched_struct_ops, gpuext_sched_ops);
	if (err)
		pr_err("gpuext: register struct_ops gpuext_sched_ops: %d\n", err);
	return err;
}

static void gpuext_sched_debugfs(struct dentry *dir)
{
	debugfs_create_file("sched_ops", 0400, dir, NULL, &gpuext_sched_ops_fops);
}
