// SPDX-License-Identifier: GPL-2.0
/*
 * gpuext.c - the gpuext core module.
 *
 * Registers the memory struct_ops type gpuext_mem_ops (gpuext_ops.h) and
 * keeps every attached ops in a list keyed by name, so several policies
 * run at once.  Drivers call the exported call sites (gpuext_core.h); each
 * call resolves the tenant of the GPU context's cgroup in the registry map
 * the control plane handed us, and runs the ops that tenant names.  Policies
 * never touch driver state: they ask through kfuncs, and the core checks
 * the request (bounds) before applying it to its own copy of the candidates.
 * No ops, a declined call, an error or any refused request all leave the
 * driver's stock behaviour.
 *
 * debugfs (/sys/kernel/debug/gpuext):
 *   registry  write: fd of the pinned gpuext_cgroups map (cgroup id -> tenant
 *             config); read: "map <id>" or "none"
 *   ops       read: one line per attached ops with its counters and its
 *             GPUEXT_POLICY_NAMED id
 *   abi_version  read-only: GPUEXT_ABI_VERSION of this core (loaders refuse
 *             to attach policies built for another)
 *   system    write: name of the memory ops that arbitrates device memory
 *             across tenants (evict_arbitrate), "" or "none" for stock;
 *             read: that name or "none"
 *   migrate   read: "calls N pages N refused N" of bpf_gpuext_migrate_range
 */
#include <linux/bpf.h>
#include <linux/bpf_verifier.h>
#include <linux/btf.h>
#include <linux/btf_ids.h>
#include <linux/cgroup.h>
#include <linux/debugfs.h>
#include <linux/hash.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/rculist.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/srcu.h>
#include <linux/string.h>
#include <linux/uaccess.h>
#include <linux/version.h>

#include "gpuext_abi.h"
#include "gpuext_ops.h"
#include "gpuext_core.h"

/* bpf_map_get() for the registry map fd; the namespace is a string literal since 6.13 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 13, 0)
MODULE_IMPORT_NS("BPF_INTERNAL");
#else
MODULE_IMPORT_NS(BPF_INTERNAL);
#endif

/* Trusted pointer arguments are every kfunc's default since 6.19, and the flag is gone. */
#ifndef KF_TRUSTED_ARGS
#define KF_TRUSTED_ARGS 0
#endif

struct gpuext_ctx {
	u64 cgroup_id;
	u64 id;                /* never reused: bpf_gpuext_migrate_range names a context by it */
	struct list_head node; /* gpuext_ctxs */
	const struct gpuext_migrate_ops *migrate; /* set once by the driver, or NULL */
	void *migrate_priv;
	struct rcu_head rcu; /* a context without migrate ops is freed after an SRCU grace period */
};

/* Every live context, for bpf_gpuext_migrate_range (it sleeps: SRCU readers). */
static LIST_HEAD(gpuext_ctxs);
static DEFINE_MUTEX(gpuext_ctxs_lock);
DEFINE_STATIC_SRCU(gpuext_ctx_srcu);
static atomic64_t gpuext_ctx_seq;
static atomic64_t gpuext_migrate_calls, gpuext_migrate_pages, gpuext_migrate_refused;

/* An attached memory ops; lives from reg to unreg (+ an RCU grace period). */
struct gpuext_mem_entry {
	struct list_head node;
	/* The struct_ops map's kernel copy; replaced in place by a link update. Readers: READ_ONCE. */
	struct gpuext_mem_ops *ops;
	char name[GPUEXT_OPS_NAME_LEN];
	u32 id; /* GPUEXT_POLICY_NAMED id of name (a tenant config may name the ops by it) */
	atomic64_t calls;
	atomic64_t handled;
	atomic64_t errors;
	atomic64_t refused;
};

static LIST_HEAD(gpuext_mem_list);      /* RCU readers, writers hold gpuext_mem_lock */
static DEFINE_MUTEX(gpuext_mem_lock);

static struct bpf_map __rcu *gpuext_registry; /* cgroup id -> gpuext_tenant_config */
static DEFINE_MUTEX(gpuext_registry_lock);

static struct dentry *gpuext_debugfs;
static u32 gpuext_abi_version = GPUEXT_ABI_VERSION; /* debugfs abi_version, 0444 */

/* Name of the system memory ops (evict_arbitrate); looked up per call, so detach needs no fixup. */
static char gpuext_system_name[GPUEXT_OPS_NAME_LEN];
static DEFINE_SPINLOCK(gpuext_system_lock);

/* enum gpuext_eviction_policy -> the ops name a tenant asks for. */
static const char *const gpuext_evict_names[] = {
	[GPUEXT_EVICT_DEFAULT] = NULL,
	[GPUEXT_EVICT_LRU] = "lru",
	[GPUEXT_EVICT_FIFO] = "fifo",
	[GPUEXT_EVICT_LFU] = "lfu",
	[GPUEXT_EVICT_MRU] = "mru",
	[GPUEXT_EVICT_TENANT_QUOTA] = "tenant_quota",
	[GPUEXT_EVICT_PRIORITY_WEIGHTED] = "prio_weighted",
	[GPUEXT_EVICT_FREQ_DECAY] = "freq_decay",
};

/* enum gpuext_prefetch_policy -> ops name. */
static const char *const gpuext_prefetch_names[GPUEXT_PREFETCH_STRIDE + 1] = {
	[GPUEXT_PREFETCH_DEFAULT] = NULL,
	[GPUEXT_PREFETCH_NONE] = "pf_none",
	[GPUEXT_PREFETCH_ALWAYS_MAX] = "pf_always_max",
	[GPUEXT_PREFETCH_TREE_THRESHOLD] = "pf_tree",
	[GPUEXT_PREFETCH_SEQUENTIAL] = "pf_sequential",
	[GPUEXT_PREFETCH_STRIDE] = "pf_stride",
};
static const size_t gpuext_prefetch_names_n = ARRAY_SIZE(gpuext_prefetch_names);

/* ---- ops registry ---------------------------------------------------- */

/* GPUEXT_POLICY_NAMED | FNV-1a 32 of the ops name (gpuext_abi.h). */
static u32 gpuext_named_id(const char *name)
{
	u32 h = GPUEXT_FNV32_OFFSET;

	for (; *name; name++) {
		h ^= (u8)*name;
		h *= GPUEXT_FNV32_PRIME;
	}
	return GPUEXT_POLICY_NAMED | (h & ~GPUEXT_POLICY_NAMED);
}

static struct gpuext_mem_entry *gpuext_find_id_locked(u32 id)
{
	struct gpuext_mem_entry *e;

	list_for_each_entry_rcu(e, &gpuext_mem_list, node, lockdep_is_held(&gpuext_mem_lock))
		if (e->id == id)
			return e;
	return NULL;
}

static struct gpuext_mem_entry *gpuext_find_locked(const char *name)
{
	struct gpuext_mem_entry *e;

	list_for_each_entry_rcu(e, &gpuext_mem_list, node, lockdep_is_held(&gpuext_mem_lock))
		if (!strncmp(e->name, name, GPUEXT_OPS_NAME_LEN))
			return e;
	return NULL;
}

/* Caller holds rcu_read_lock(). */
static struct gpuext_mem_entry *gpuext_find_rcu(const char *name)
{
	struct gpuext_mem_entry *e;

	list_for_each_entry_rcu(e, &gpuext_mem_list, node)
		if (!strncmp(e->name, name, GPUEXT_OPS_NAME_LEN))
			return e;
	return NULL;
}

static int gpuext_mem_reg(void *kdata, struct bpf_link *link)
{
	struct gpuext_mem_ops *ops = kdata;
	struct gpuext_mem_entry *e;
	int err = 0;

	e = kzalloc(sizeof(*e), GFP_KERNEL);
	if (!e)
		return -ENOMEM;
	e->ops = ops;
	memcpy(e->name, ops->name, GPUEXT_OPS_NAME_LEN);
	e->id = gpuext_named_id(e->name);

	mutex_lock(&gpuext_mem_lock);
	if (gpuext_find_locked(e->name) || gpuext_find_id_locked(e->id)) {
		err = -EEXIST;
	} else {
		list_add_tail_rcu(&e->node, &gpuext_mem_list);
		pr_info("gpuext: memory ops \"%s\" attached\n", e->name);
	}
	mutex_unlock(&gpuext_mem_lock);
	if (err)
		kfree(e);
	return err;
}

static void gpuext_mem_unreg(void *kdata, struct bpf_link *link)
{
	struct gpuext_mem_entry *e, *found = NULL;

	mutex_lock(&gpuext_mem_lock);
	list_for_each_entry(e, &gpuext_mem_list, node) {
		if (e->ops == kdata) {
			list_del_rcu(&e->node);
			found = e;
			break;
		}
	}
	mutex_unlock(&gpuext_mem_lock);
	if (!found)
		return;
	/* No call site still runs these ops once this returns. */
	synchronize_rcu();
	pr_info("gpuext: memory ops \"%s\" detached (calls %lld refused %lld)\n",
		found->name, atomic64_read(&found->calls), atomic64_read(&found->refused));
	kfree(found);
}

/*
 * BPF_LINK_UPDATE of an attached ops' link: the new ops take the old ones'
 * place in the list at once, so a tenant that names them never sees no
 * policy.  The name (what tenants name) must stay the same.
 */
static int gpuext_mem_update(void *kdata, void *old_kdata, struct bpf_link *link)
{
	struct gpuext_mem_ops *ops = kdata;
	struct gpuext_mem_entry *e, *found = NULL;

	mutex_lock(&gpuext_mem_lock);
	list_for_each_entry(e, &gpuext_mem_list, node) {
		if (e->ops == old_kdata) {
			found = e;
			break;
		}
	}
	if (found && !strncmp(found->name, ops->name, GPUEXT_OPS_NAME_LEN))
		WRITE_ONCE(found->ops, ops);
	mutex_unlock(&gpuext_mem_lock);
	if (!found)
		return -ENOENT;
	if (READ_ONCE(found->ops) != ops)
		return -EINVAL; /* another name: attach it beside, then detach the old */
	/* No call site still runs the old ops once this returns. */
	synchronize_rcu();
	pr_info("gpuext: memory ops \"%s\" replaced\n", found->name);
	return 0;
}

static int gpuext_mem_init(struct btf *btf)
{
	return 0;
}

/*
 * The name member of both struct_ops kinds: required, NUL terminated,
 * [a-z0-9_]. Copies it and returns 1 (member handled), or -EINVAL.
 */
static int gpuext_ops_name_copy(char dst[GPUEXT_OPS_NAME_LEN], const char src[GPUEXT_OPS_NAME_LEN])
{
	if (!memchr(src, 0, GPUEXT_OPS_NAME_LEN) || !src[0])
		return -EINVAL;
	for (const char *p = src; *p; p++)
		if (!(islower(*p) || isdigit(*p) || *p == '_'))
			return -EINVAL;
	memcpy(dst, src, GPUEXT_OPS_NAME_LEN);
	return 1;
}

static int gpuext_mem_init_member(const struct btf_type *t, const struct btf_member *member,
				  void *kdata, const void *udata)
{
	const struct gpuext_mem_ops *uops = udata;
	struct gpuext_mem_ops *kops = kdata;
	u32 moff = __btf_member_bit_offset(t, member) / 8;

	if (moff != offsetof(struct gpuext_mem_ops, name))
		return 0;
	return gpuext_ops_name_copy(kops->name, uops->name);
}

/*
 * bpf_get_current_comm for gpuext's struct_ops programs (policies written
 * for gpu_ext's scheduling ops name the task that creates a TSG).  The
 * kernel's proto is not exported to modules, so the core brings its own:
 * the same contract (the comm of current, NUL padded to size).  Every hook
 * runs in the task that made the driver call.
 */
BPF_CALL_2(gpuext_get_current_comm, char *, buf, u32, size)
{
	strscpy_pad(buf, current->comm, size);
	return 0;
}

static const struct bpf_func_proto gpuext_get_current_comm_proto = {
	.func = gpuext_get_current_comm,
	.gpl_only = false,
	.ret_type = RET_INTEGER,
	.arg1_type = ARG_PTR_TO_UNINIT_MEM,
	.arg2_type = ARG_CONST_SIZE,
};

static const struct bpf_func_proto *gpuext_get_func_proto(enum bpf_func_id func_id,
							  const struct bpf_prog *prog)
{
	if (func_id == BPF_FUNC_get_current_comm)
		return &gpuext_get_current_comm_proto;
	return bpf_base_func_proto(func_id, prog);
}

static bool gpuext_is_valid_access(int off, int size, enum bpf_access_type type,
				   const struct bpf_prog *prog, struct bpf_insn_access_aux *info)
{
	return bpf_tracing_btf_ctx_access(off, size, type, prog, info);
}

/* Contexts are read-only to policies: no btf_struct_access, so writes are refused. */
static const struct bpf_verifier_ops gpuext_verifier_ops = {
	.get_func_proto = gpuext_get_func_proto,
	.is_valid_access = gpuext_is_valid_access,
};

static int gpuext_stub_prefetch(struct gpuext_prefetch_ctx *ctx)
{
	return GPUEXT_RET_DEFAULT;
}

static int gpuext_stub_evict_prepare(struct gpuext_evict_ctx *ctx)
{
	return GPUEXT_RET_DEFAULT;
}

static int gpuext_stub_evict_arbitrate(struct gpuext_arbitrate_ctx *ctx)
{
	return GPUEXT_RET_DEFAULT;
}

static int gpuext_stub_block_activate(struct gpuext_block_ctx *ctx)
{
	return GPUEXT_RET_DEFAULT;
}

static int gpuext_stub_block_access(struct gpuext_block_ctx *ctx)
{
	return GPUEXT_RET_DEFAULT;
}

static int gpuext_stub_prefetch_node(struct gpuext_prefetch_node_ctx *ctx)
{
	return GPUEXT_RET_DEFAULT;
}

static struct gpuext_mem_ops gpuext_mem_cfi_stubs = {
	.prefetch = gpuext_stub_prefetch,
	.evict_prepare = gpuext_stub_evict_prepare,
	.evict_arbitrate = gpuext_stub_evict_arbitrate,
	.block_activate = gpuext_stub_block_activate,
	.block_access = gpuext_stub_block_access,
	.prefetch_node = gpuext_stub_prefetch_node,
};

static struct bpf_struct_ops gpuext_mem_struct_ops = {
	.verifier_ops = &gpuext_verifier_ops,
	.init = gpuext_mem_init,
	.init_member = gpuext_mem_init_member,
	.reg = gpuext_mem_reg,
	.unreg = gpuext_mem_unreg,
	.update = gpuext_mem_update,
	.cfi_stubs = &gpuext_mem_cfi_stubs,
	.name = "gpuext_mem_ops",
	.owner = THIS_MODULE,
};

/* ---- request kfuncs -------------------------------------------------- */

static bool gpuext_lookup_tenant(u64 cgid, struct gpuext_tenant_config *cfg);

/* A prefetch call as the core runs it: the policy sees pub only. */
struct gpuext_prefetch_call {
	struct gpuext_prefetch_ctx pub;
	const unsigned long *resident; /* driver's bitmap of resident pages, or NULL */
};

__bpf_kfunc_start_defs();

/*
 * Copy candidate idx into *info.  -ENOENT past the last candidate: a read,
 * not a request, so it is the policy's end-of-list signal and not counted.
 */
__bpf_kfunc int bpf_gpuext_evict_chunk(struct gpuext_evict_ctx *ctx, u32 idx,
				       struct gpuext_chunk_info *info)
{
	if (idx >= ctx->nr_candidates || idx >= GPUEXT_EVICT_MAX_CANDIDATES) {
		memset(info, 0, sizeof(*info));
		return -ENOENT;
	}
	*info = ctx->cand[idx];
	return 0;
}

/* Ask that candidate idx be evicted before all others.  Refused when out of range. */
__bpf_kfunc int bpf_gpuext_evict_move_to_front(struct gpuext_evict_ctx *ctx, u32 idx)
{
	struct gpuext_chunk_info c;

	ctx->requests++;
	if (idx >= ctx->nr_candidates || idx >= GPUEXT_EVICT_MAX_CANDIDATES) {
		ctx->refused++;
		return -ERANGE;
	}
	c = ctx->cand[idx];
	memmove(&ctx->cand[1], &ctx->cand[0], idx * sizeof(c));
	ctx->cand[0] = c;
	return 0;
}

/* Ask to prefetch [first, last]; it must hold the faulting page and lie in the allowed region. */
__bpf_kfunc int bpf_gpuext_prefetch_set_region(struct gpuext_prefetch_ctx *ctx, u32 first, u32 last)
{
	ctx->requests++;
	if (first > last || first < ctx->region_first || last > ctx->region_last ||
	    ctx->fault_page < first || ctx->fault_page > last) {
		ctx->refused++;
		return -ERANGE;
	}
	ctx->result_first = first;
	ctx->result_last = last;
	return 0;
}

/* Copy arbitration candidate idx into *owner; -ENOENT past the last (end of list, not counted). */
__bpf_kfunc int bpf_gpuext_arbitrate_owner(struct gpuext_arbitrate_ctx *ctx, u32 idx,
					   struct gpuext_evict_owner *owner)
{
	if (idx >= ctx->nr_candidates || idx >= GPUEXT_EVICT_MAX_CANDIDATES) {
		memset(owner, 0, sizeof(*owner));
		return -ENOENT;
	}
	*owner = ctx->cand[idx];
	return 0;
}

/* Ask that context idx give up the chunk.  Refused when out of range. */
__bpf_kfunc int bpf_gpuext_arbitrate_pick(struct gpuext_arbitrate_ctx *ctx, u32 idx)
{
	ctx->requests++;
	if (idx >= ctx->nr_candidates || idx >= GPUEXT_EVICT_MAX_CANDIDATES) {
		ctx->refused++;
		return -ERANGE;
	}
	ctx->picked = idx;
	return 0;
}

/*
 * How many pages of [first, last] are resident, for a policy that weighs
 * occupancy (the tree rule).  A read, not a request.  -ENODATA when the
 * driver gave no residency, -ERANGE outside the allowed region.
 */
__bpf_kfunc int bpf_gpuext_prefetch_resident(struct gpuext_prefetch_ctx *ctx, u32 first, u32 last)
{
	const struct gpuext_prefetch_call *call = container_of(ctx, struct gpuext_prefetch_call, pub);
	int n = 0;
	u32 p;

	if (!call->resident)
		return -ENODATA;
	if (first > last || first < ctx->region_first || last > ctx->region_last)
		return -ERANGE;
	for (p = first; p <= last; p++)
		n += test_bit(p, call->resident);
	return n;
}

/*
 * The prefetch_param of the faulting context's tenant (0 when none), so a
 * policy follows its tenant's config.  A read, not a request.
 */
__bpf_kfunc u64 bpf_gpuext_prefetch_param(struct gpuext_prefetch_ctx *ctx)
{
	struct gpuext_tenant_config cfg;
	u64 param = 0;

	rcu_read_lock();
	if (gpuext_lookup_tenant(ctx->cgroup_id, &cfg))
		param = cfg.prefetch_param;
	rcu_read_unlock();
	return param;
}

/*
 * The eviction_param of the evicting context's tenant (0 when none), so an
 * eviction policy follows its tenant's config.  A read, not a request.
 */
__bpf_kfunc u64 bpf_gpuext_evict_param(struct gpuext_evict_ctx *ctx)
{
	struct gpuext_tenant_config cfg;
	u64 param = 0;

	rcu_read_lock();
	if (gpuext_lookup_tenant(ctx->cgroup_id, &cfg))
		param = cfg.eviction_param;
	rcu_read_unlock();
	return param;
}

/*
 * The eviction_param of arbitration candidate idx's tenant (0 when it has
 * none or idx is past the last), so a system ops weighs each tenant by its
 * own config (prio_weighted's weight).  A read, not a request.
 */
__bpf_kfunc u64 bpf_gpuext_arbitrate_param(struct gpuext_arbitrate_ctx *ctx, u32 idx)
{
	struct gpuext_tenant_config cfg;
	u64 param = 0;

	if (idx >= ctx->nr_candidates || idx >= GPUEXT_EVICT_MAX_CANDIDATES)
		return 0;
	rcu_read_lock();
	if (gpuext_lookup_tenant(ctx->cand[idx].cgroup_id, &cfg))
		param = cfg.eviction_param;
	rcu_read_unlock();
	return param;
}

/*
 * Take (1) or leave (0) this node of the prefetch tree.  Refused for any
 * other value, and take=1 for a node outside the allowed region or
 * without the faulting page.
 */
__bpf_kfunc int bpf_gpuext_prefetch_node_take(struct gpuext_prefetch_node_ctx *ctx, u32 take)
{
	ctx->requests++;
	if (take > 1 || (take && (ctx->node_first < ctx->region_first || ctx->node_last > ctx->region_last ||
				  ctx->fault_page < ctx->node_first || ctx->fault_page > ctx->node_last))) {
		ctx->refused++;
		return -ERANGE;
	}
	ctx->take = take;
	return 0;
}

static struct gpuext_mem_entry *gpuext_policy_rcu(const char *const *names, size_t n, u32 id);

/*
 * Migrate a range of a context ahead of its faults (sleepable: a BPF
 * workqueue callback calls it).  The core checks that the context lives
 * and its driver can migrate, that it belongs to tenant_id and that tenant
 * has its prefetch policy attached (so a policy acts for a tenant that
 * chose it, and a context that changed hands is refused), and the driver's
 * bounds; then the driver migrates.
 */
__bpf_kfunc int bpf_gpuext_migrate_range(u64 ctx_id, u32 tenant_id, u64 va_block, u32 first, u32 last)
{
	struct gpuext_tenant_config cfg;
	struct gpuext_ctx *c, *found = NULL;
	int idx, ret;
	bool ok;

	atomic64_inc(&gpuext_migrate_calls);
	idx = srcu_read_lock(&gpuext_ctx_srcu);
	list_for_each_entry_srcu(c, &gpuext_ctxs, node, srcu_read_lock_held(&gpuext_ctx_srcu))
		if (c->id == ctx_id) {
			found = c;
			break;
		}
	if (!found) {
		ret = -ENOENT;
		goto out;
	}
	if (!found->migrate) {
		ret = -EOPNOTSUPP;
		goto out;
	}
	rcu_read_lock();
	ok = tenant_id && gpuext_lookup_tenant(found->cgroup_id, &cfg) && cfg.tenant_id == tenant_id &&
	     gpuext_policy_rcu(gpuext_prefetch_names, gpuext_prefetch_names_n, cfg.prefetch_policy);
	rcu_read_unlock();
	if (!ok) {
		ret = -EPERM;
		goto out;
	}
	if (va_block >= found->migrate->nr_blocks || first > last ||
	    last >= found->migrate->pages_per_block) {
		ret = -ERANGE;
		goto out;
	}
	ret = found->migrate->migrate(found->migrate_priv, va_block, first, last);
	if (ret > 0)
		atomic64_add(ret, &gpuext_migrate_pages);
out:
	srcu_read_unlock(&gpuext_ctx_srcu, idx);
	if (ret < 0)
		atomic64_inc(&gpuext_migrate_refused);
	return ret;
}

__bpf_kfunc_end_defs();

BTF_KFUNCS_START(gpuext_kfunc_ids)
BTF_ID_FLAGS(func, bpf_gpuext_evict_chunk, KF_TRUSTED_ARGS)
BTF_ID_FLAGS(func, bpf_gpuext_evict_move_to_front, KF_TRUSTED_ARGS)
BTF_ID_FLAGS(func, bpf_gpuext_prefetch_set_region, KF_TRUSTED_ARGS)
BTF_ID_FLAGS(func, bpf_gpuext_arbitrate_owner, KF_TRUSTED_ARGS)
BTF_ID_FLAGS(func, bpf_gpuext_arbitrate_pick, KF_TRUSTED_ARGS)
BTF_ID_FLAGS(func, bpf_gpuext_prefetch_param, KF_TRUSTED_ARGS)
BTF_ID_FLAGS(func, bpf_gpuext_prefetch_resident, KF_TRUSTED_ARGS)
BTF_ID_FLAGS(func, bpf_gpuext_evict_param, KF_TRUSTED_ARGS)
BTF_ID_FLAGS(func, bpf_gpuext_arbitrate_param, KF_TRUSTED_ARGS)
BTF_ID_FLAGS(func, bpf_gpuext_prefetch_node_take, KF_TRUSTED_ARGS)
BTF_ID_FLAGS(func, bpf_gpuext_migrate_range, KF_SLEEPABLE)
/* sched.c (one kfunc set per module and program type) */
BTF_ID_FLAGS(func, bpf_gpuext_tsg_set_timeslice, KF_TRUSTED_ARGS)
BTF_ID_FLAGS(func, bpf_gpuext_tsg_set_interleave, KF_TRUSTED_ARGS)
BTF_ID_FLAGS(func, bpf_gpuext_tsg_preempt, KF_TRUSTED_ARGS)
BTF_KFUNCS_END(gpuext_kfunc_ids)

static const struct btf_kfunc_id_set gpuext_kfunc_set = {
	.owner = THIS_MODULE,
	.set = &gpuext_kfunc_ids,
};

/* ---- tenant resolution ----------------------------------------------- */

/* Caller holds rcu_read_lock().  True when cgid has a tenant config. */
static bool gpuext_lookup_tenant(u64 cgid, struct gpuext_tenant_config *cfg)
{
	struct bpf_map *map = rcu_dereference(gpuext_registry);
	void *val;

	if (!map)
		return false;
	val = map->ops->map_lookup_elem(map, &cgid);
	if (!val)
		return false;
	memcpy(cfg, val, sizeof(*cfg));
	return cfg->tenant_id != 0;
}

static const char *gpuext_name_of(const char *const *names, size_t n, u32 id)
{
	return id < n ? names[id] : NULL;
}

/*
 * The attached memory ops a tenant config's eviction_policy or
 * prefetch_policy value names: an enum value through names, or a
 * GPUEXT_POLICY_NAMED id.  Caller holds rcu_read_lock().
 */
static struct gpuext_mem_entry *gpuext_policy_rcu(const char *const *names, size_t n, u32 id)
{
	struct gpuext_mem_entry *e;
	const char *name;

	if (id & GPUEXT_POLICY_NAMED) {
		list_for_each_entry_rcu(e, &gpuext_mem_list, node)
			if (e->id == id)
				return e;
		return NULL;
	}
	name = gpuext_name_of(names, n, id);
	return name ? gpuext_find_rcu(name) : NULL;
}

/* ---- call sites -------------------------------------------------------- */

struct gpuext_ctx *gpuext_ctx_create(void)
{
	struct gpuext_ctx *gctx = kzalloc(sizeof(*gctx), GFP_KERNEL);

	if (!gctx)
		return NULL;
	/* What bpf_get_current_cgroup_id() returns for the creating task. */
	rcu_read_lock();
	gctx->cgroup_id = cgroup_id(task_dfl_cgroup(current));
	rcu_read_unlock();
	gctx->id = atomic64_inc_return(&gpuext_ctx_seq);
	mutex_lock(&gpuext_ctxs_lock);
	list_add_tail_rcu(&gctx->node, &gpuext_ctxs);
	mutex_unlock(&gpuext_ctxs_lock);
	return gctx;
}
EXPORT_SYMBOL_GPL(gpuext_ctx_create);

static void gpuext_ctx_free_srcu(struct rcu_head *rcu)
{
	kfree(container_of(rcu, struct gpuext_ctx, rcu));
}

void gpuext_ctx_destroy(struct gpuext_ctx *gctx)
{
	if (!gctx)
		return;
	mutex_lock(&gpuext_ctxs_lock);
	list_del_rcu(&gctx->node);
	mutex_unlock(&gpuext_ctxs_lock);
	if (smp_load_acquire(&gctx->migrate)) {
		/*
		 * A migratable context (a UVM VA space, destroyed where it may
		 * sleep, under no GPU lock): its driver frees what the ops use
		 * once this returns, so wait until no migration runs.
		 */
		synchronize_srcu(&gpuext_ctx_srcu);
		kfree(gctx);
		return;
	}
	/*
	 * No migrate ops (an RM channel group, destroyed under RM's GPU lock,
	 * which a migration elsewhere may need): never wait for migrations.
	 * A migrate request's list walk may still be looking at this entry
	 * (its id, node and migrate); free it once those readers are gone.
	 */
	call_srcu(&gpuext_ctx_srcu, &gctx->rcu, gpuext_ctx_free_srcu);
}
EXPORT_SYMBOL_GPL(gpuext_ctx_destroy);

u64 gpuext_ctx_id(const struct gpuext_ctx *gctx)
{
	return gctx->id;
}
EXPORT_SYMBOL_GPL(gpuext_ctx_id);

int gpuext_ctx_set_migrate(struct gpuext_ctx *gctx, const struct gpuext_migrate_ops *ops, void *priv)
{
	if (!gctx || !ops || !ops->migrate || !ops->nr_blocks || !ops->pages_per_block ||
	    ops->pages_per_block > GPUEXT_MIGRATE_MAX_PAGES)
		return -EINVAL;
	if (gctx->migrate)
		return -EBUSY;
	gctx->migrate_priv = priv;
	smp_store_release(&gctx->migrate, ops);
	return 0;
}
EXPORT_SYMBOL_GPL(gpuext_ctx_set_migrate);

u64 gpuext_ctx_cgroup_id(const struct gpuext_ctx *gctx)
{
	return gctx->cgroup_id;
}
EXPORT_SYMBOL_GPL(gpuext_ctx_cgroup_id);

int gpuext_evict_prepare(struct gpuext_ctx *gctx, struct gpuext_evict_ctx *ectx,
			 char ops_name[GPUEXT_OPS_NAME_LEN])
{
	struct gpuext_tenant_config cfg;
	struct gpuext_chunk_info *saved;
	struct gpuext_mem_entry *e;
	struct gpuext_mem_ops *ops;
	size_t bytes;
	int ret = 0;

	if (!gctx || !ectx || ectx->nr_candidates > GPUEXT_EVICT_MAX_CANDIDATES)
		return -EINVAL;
	if (ops_name)
		ops_name[0] = 0;
	ectx->cgroup_id = gctx->cgroup_id;
	ectx->tenant_id = 0;
	ectx->requests = 0;
	ectx->refused = 0;
	bytes = ectx->nr_candidates * sizeof(ectx->cand[0]);
	saved = kmemdup(ectx->cand, bytes ?: 1, GFP_KERNEL);
	if (!saved)
		return -ENOMEM;

	rcu_read_lock();
	if (!gpuext_lookup_tenant(gctx->cgroup_id, &cfg))
		goto out;
	ectx->tenant_id = cfg.tenant_id;
	e = gpuext_policy_rcu(gpuext_evict_names, ARRAY_SIZE(gpuext_evict_names), cfg.eviction_policy);
	ops = e ? READ_ONCE(e->ops) : NULL;
	if (!ops || !ops->evict_prepare)
		goto out;
	atomic64_inc(&e->calls);
	ret = ops->evict_prepare(ectx);
	if (ectx->refused)
		atomic64_add(ectx->refused, &e->refused);
	if (ret < 0)
		atomic64_inc(&e->errors);
	if (ret == GPUEXT_RET_HANDLED && !ectx->refused) {
		atomic64_inc(&e->handled);
		if (ops_name)
			memcpy(ops_name, e->name, GPUEXT_OPS_NAME_LEN);
		ret = 1;
	} else {
		/* Declined, erred or asked for something refused: stock order. */
		memcpy(ectx->cand, saved, bytes);
		ret = 0;
	}
out:
	rcu_read_unlock();
	kfree(saved);
	return ret;
}
EXPORT_SYMBOL_GPL(gpuext_evict_prepare);

static int gpuext_prefetch_run(struct gpuext_ctx *gctx, struct gpuext_prefetch_ctx *pctx)
{
	struct gpuext_tenant_config cfg;
	struct gpuext_mem_entry *e;
	struct gpuext_mem_ops *ops;
	int ret = 0;

	pctx->cgroup_id = gctx->cgroup_id;
	pctx->ctx_id = gctx->id;
	pctx->tenant_id = 0;
	pctx->requests = 0;
	pctx->refused = 0;
	pctx->result_first = pctx->fault_page;
	pctx->result_last = pctx->fault_page;

	rcu_read_lock();
	if (!gpuext_lookup_tenant(gctx->cgroup_id, &cfg))
		goto out;
	pctx->tenant_id = cfg.tenant_id;
	e = gpuext_policy_rcu(gpuext_prefetch_names, ARRAY_SIZE(gpuext_prefetch_names), cfg.prefetch_policy);
	ops = e ? READ_ONCE(e->ops) : NULL;
	if (!ops || !ops->prefetch)
		goto out;
	atomic64_inc(&e->calls);
	ret = (ops->prefetch)(pctx); /* prefetch() is a kernel macro */
	if (pctx->refused)
		atomic64_add(pctx->refused, &e->refused);
	if (ret < 0)
		atomic64_inc(&e->errors);
	if (ret == GPUEXT_RET_HANDLED && !pctx->refused && pctx->requests) {
		atomic64_inc(&e->handled);
		ret = 1;
	} else {
		pctx->result_first = pctx->fault_page;
		pctx->result_last = pctx->fault_page;
		ret = 0;
	}
out:
	rcu_read_unlock();
	return ret;
}

/*
 * Policies run on the core's own copy of the context, so the residency
 * kfunc can reach the driver's bitmap behind it and nothing else.
 */
static int gpuext_prefetch_call(struct gpuext_ctx *gctx, struct gpuext_prefetch_ctx *pctx,
				const unsigned long *resident)
{
	struct gpuext_prefetch_call call = { .resident = resident };
	int ret;

	if (!gctx || !pctx || pctx->region_first > pctx->region_last)
		return -EINVAL;
	call.pub = *pctx;
	ret = gpuext_prefetch_run(gctx, &call.pub);
	*pctx = call.pub;
	return ret;
}

int gpuext_prefetch(struct gpuext_ctx *gctx, struct gpuext_prefetch_ctx *pctx)
{
	return gpuext_prefetch_call(gctx, pctx, NULL);
}
EXPORT_SYMBOL_GPL(gpuext_prefetch);

int gpuext_prefetch_resident(struct gpuext_ctx *gctx, struct gpuext_prefetch_ctx *pctx,
			     const unsigned long *resident)
{
	return gpuext_prefetch_call(gctx, pctx, resident);
}
EXPORT_SYMBOL_GPL(gpuext_prefetch_resident);

int gpuext_prefetch_node(struct gpuext_ctx *gctx, struct gpuext_prefetch_node_ctx *nctx)
{
	struct gpuext_tenant_config cfg;
	struct gpuext_mem_entry *e;
	struct gpuext_mem_ops *ops;
	int ret = 0;

	if (!gctx || !nctx || nctx->node_first > nctx->node_last || nctx->region_first > nctx->region_last)
		return -EINVAL;
	nctx->cgroup_id = gctx->cgroup_id;
	nctx->ctx_id = gctx->id;
	nctx->tenant_id = 0;
	nctx->take = 0;
	nctx->requests = 0;
	nctx->refused = 0;
	rcu_read_lock();
	if (!gpuext_lookup_tenant(gctx->cgroup_id, &cfg))
		goto out;
	nctx->tenant_id = cfg.tenant_id;
	e = gpuext_policy_rcu(gpuext_prefetch_names, gpuext_prefetch_names_n, cfg.prefetch_policy);
	ops = e ? READ_ONCE(e->ops) : NULL;
	if (!ops || !ops->prefetch_node)
		goto out;
	atomic64_inc(&e->calls);
	ret = ops->prefetch_node(nctx);
	if (nctx->refused)
		atomic64_add(nctx->refused, &e->refused);
	if (ret < 0)
		atomic64_inc(&e->errors);
	if (ret == GPUEXT_RET_HANDLED && !nctx->refused && nctx->requests) {
		atomic64_inc(&e->handled);
		ret = 1;
	} else {
		nctx->take = 0;
		ret = 0;
	}
out:
	rcu_read_unlock();
	return ret;
}
EXPORT_SYMBOL_GPL(gpuext_prefetch_node);

static void gpuext_block_notify(struct gpuext_ctx *gctx, struct gpuext_block_ctx *bctx, bool activate)
{
	struct gpuext_tenant_config cfg;
	struct gpuext_mem_entry *e;
	struct gpuext_mem_ops *ops;
	int (*hook)(struct gpuext_block_ctx *ctx);

	if (!gctx || !bctx)
		return;
	bctx->cgroup_id = gctx->cgroup_id;
	bctx->tenant_id = 0;
	rcu_read_lock();
	if (!gpuext_lookup_tenant(gctx->cgroup_id, &cfg))
		goto out;
	bctx->tenant_id = cfg.tenant_id;
	e = gpuext_policy_rcu(gpuext_evict_names, ARRAY_SIZE(gpuext_evict_names), cfg.eviction_policy);
	ops = e ? READ_ONCE(e->ops) : NULL;
	hook = !ops ? NULL : activate ? ops->block_activate : ops->block_access;
	if (!hook)
		goto out;
	atomic64_inc(&e->calls);
	if (hook(bctx) < 0)
		atomic64_inc(&e->errors);
out:
	rcu_read_unlock();
}

void gpuext_block_activate(struct gpuext_ctx *gctx, struct gpuext_block_ctx *bctx)
{
	gpuext_block_notify(gctx, bctx, true);
}
EXPORT_SYMBOL_GPL(gpuext_block_activate);

void gpuext_block_access(struct gpuext_ctx *gctx, struct gpuext_block_ctx *bctx)
{
	gpuext_block_notify(gctx, bctx, false);
}
EXPORT_SYMBOL_GPL(gpuext_block_access);

int gpuext_evict_arbitrate(struct gpuext_arbitrate_ctx *actx)
{
	struct gpuext_tenant_config cfg;
	char name[GPUEXT_OPS_NAME_LEN];
	struct gpuext_mem_entry *e;
	struct gpuext_mem_ops *ops;
	int ret = 0;
	u32 i;

	if (!actx || actx->nr_candidates > GPUEXT_EVICT_MAX_CANDIDATES)
		return -EINVAL;
	actx->picked = U32_MAX;
	actx->requests = 0;
	actx->refused = 0;
	spin_lock(&gpuext_system_lock);
	memcpy(name, gpuext_system_name, sizeof(name));
	spin_unlock(&gpuext_system_lock);

	rcu_read_lock();
	for (i = 0; i < actx->nr_candidates; i++) {
		struct gpuext_evict_owner *o = &actx->cand[i];

		o->tenant_id = 0;
		o->quota_bytes = 0;
		o->priority_class = GPUEXT_PRIO_STANDARD;
		if (gpuext_lookup_tenant(o->cgroup_id, &cfg)) {
			o->tenant_id = cfg.tenant_id;
			o->priority_class = cfg.priority_class;
			if (cfg.flags & GPUEXT_TENANT_F_QUOTA)
				o->quota_bytes = cfg.quota_bytes;
		}
	}
	for (i = 0; i < actx->nr_candidates; i++) {
		struct gpuext_evict_owner *o = &actx->cand[i];
		u32 j;

		o->tenant_resident_bytes = 0;
		for (j = 0; j < actx->nr_candidates; j++)
			if (j == i || (o->tenant_id && actx->cand[j].tenant_id == o->tenant_id))
				o->tenant_resident_bytes += actx->cand[j].resident_bytes;
	}
	e = name[0] ? gpuext_find_rcu(name) : NULL;
	ops = e ? READ_ONCE(e->ops) : NULL;
	if (!ops || !ops->evict_arbitrate)
		goto out;
	atomic64_inc(&e->calls);
	ret = ops->evict_arbitrate(actx);
	if (actx->refused)
		atomic64_add(actx->refused, &e->refused);
	if (ret < 0)
		atomic64_inc(&e->errors);
	if (ret == GPUEXT_RET_HANDLED && !actx->refused && actx->picked < actx->nr_candidates) {
		atomic64_inc(&e->handled);
		ret = 1;
	} else {
		actx->picked = U32_MAX;
		ret = 0;
	}
out:
	rcu_read_unlock();
	return ret;
}
EXPORT_SYMBOL_GPL(gpuext_evict_arbitrate);

/* ---- debugfs ------------------------------------------------------------ */

static ssize_t gpuext_system_write(struct file *file, const char __user *ubuf, size_t len, loff_t *ppos)
{
	char buf[GPUEXT_OPS_NAME_LEN] = {};
	char *name;

	if (len >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, len))
		return -EFAULT;
	name = strim(buf);
	if (!strcmp(name, "none"))
		name[0] = 0;
	for (const char *p = name; *p; p++)
		if (!(islower(*p) || isdigit(*p) || *p == '_'))
			return -EINVAL;
	spin_lock(&gpuext_system_lock);
	strscpy_pad(gpuext_system_name, name, sizeof(gpuext_system_name));
	spin_unlock(&gpuext_system_lock);
	return len;
}

static int gpuext_system_show(struct seq_file *m, void *v)
{
	char name[GPUEXT_OPS_NAME_LEN];

	spin_lock(&gpuext_system_lock);
	memcpy(name, gpuext_system_name, sizeof(name));
	spin_unlock(&gpuext_system_lock);
	seq_printf(m, "%s\n", name[0] ? name : "none");
	return 0;
}

static int gpuext_system_open(struct inode *inode, struct file *file)
{
	return single_open(file, gpuext_system_show, NULL);
}

static const struct file_operations gpuext_system_fops = {
	.owner = THIS_MODULE,
	.open = gpuext_system_open,
	.read = seq_read,
	.llseek = seq_lseek,
	.release = single_release,
	.write = gpuext_system_write,
};

static void gpuext_set_registry(struct bpf_map *map)
{
	struct bpf_map *old;

	mutex_lock(&gpuext_registry_lock);
	old = rcu_replace_pointer(gpuext_registry, map, lockdep_is_held(&gpuext_registry_lock));
	mutex_unlock(&gpuext_registry_lock);
	if (old) {
		synchronize_rcu();
		bpf_map_put(old);
	}
}

static ssize_t gpuext_registry_write(struct file *file, const char __user *ubuf, size_t len, loff_t *ppos)
{
	struct bpf_map *map;
	int fd, err;

	err = kstrtoint_from_user(ubuf, len, 10, &fd);
	if (err)
		return err;
	if (fd < 0) {
		gpuext_set_registry(NULL);
		return len;
	}
	map = bpf_map_get(fd);
	if (IS_ERR(map))
		return PTR_ERR(map);
	if (map->map_type != BPF_MAP_TYPE_HASH || map->key_size != sizeof(u64) ||
	    map->value_size != sizeof(struct gpuext_tenant_config)) {
		bpf_map_put(map);
		return -EINVAL;
	}
	gpuext_set_registry(map);
	return len;
}

static int gpuext_registry_show(struct seq_file *m, void *v)
{
	struct bpf_map *map;

	rcu_read_lock();
	map = rcu_dereference(gpuext_registry);
	if (map)
		seq_printf(m, "map %u\n", map->id);
	else
		seq_puts(m, "none\n");
	rcu_read_unlock();
	return 0;
}

static int gpuext_registry_open(struct inode *inode, struct file *file)
{
	return single_open(file, gpuext_registry_show, NULL);
}

static const struct file_operations gpuext_registry_fops = {
	.owner = THIS_MODULE,
	.open = gpuext_registry_open,
	.read = seq_read,
	.llseek = seq_lseek,
	.release = single_release,
	.write = gpuext_registry_write,
};

static int gpuext_ops_show(struct seq_file *m, void *v)
{
	struct gpuext_mem_entry *e;

	rcu_read_lock();
	list_for_each_entry_rcu(e, &gpuext_mem_list, node)
		seq_printf(m, "%s calls %lld handled %lld errors %lld refused %lld id 0x%x\n", e->name,
			   atomic64_read(&e->calls), atomic64_read(&e->handled),
			   atomic64_read(&e->errors), atomic64_read(&e->refused), e->id);
	rcu_read_unlock();
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(gpuext_ops);

static int gpuext_migrate_show(struct seq_file *m, void *v)
{
	seq_printf(m, "calls %lld pages %lld refused %lld\n", atomic64_read(&gpuext_migrate_calls),
		   atomic64_read(&gpuext_migrate_pages), atomic64_read(&gpuext_migrate_refused));
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(gpuext_migrate);

#include "sched.c" /* scheduling struct_ops, kfuncs and TSG call sites */

static int __init gpuext_init(void)
{
	int err;

	err = register_btf_kfunc_id_set(BPF_PROG_TYPE_STRUCT_OPS, &gpuext_kfunc_set);
	if (err) {
		pr_err("gpuext: register kfuncs: %d\n", err);
		return err;
	}
	err = register_bpf_struct_ops(&gpuext_mem_struct_ops, gpuext_mem_ops);
	if (err) {
		pr_err("gpuext: register struct_ops gpuext_mem_ops: %d\n", err);
		return err;
	}
	err = gpuext_sched_register();
	if (err)
		return err;
	gpuext_debugfs = debugfs_create_dir("gpuext", NULL);
	debugfs_create_u32("abi_version", 0444, gpuext_debugfs, &gpuext_abi_version);
	debugfs_create_file("registry", 0600, gpuext_debugfs, NULL, &gpuext_registry_fops);
	debugfs_create_file("ops", 0400, gpuext_debugfs, NULL, &gpuext_ops_fops);
	debugfs_create_file("system", 0600, gpuext_debugfs, NULL, &gpuext_system_fops);
	debugfs_create_file("migrate", 0400, gpuext_debugfs, NULL, &gpuext_migrate_fops);
	gpuext_sched_debugfs(gpuext_debugfs);
	pr_info("gpuext: core loaded (abi %d)\n", GPUEXT_ABI_VERSION);
	return 0;
}

static void __exit gpuext_exit(void)
{
	/* Attached struct_ops maps hold a reference on this module: none are left. */
	debugfs_remove_recursive(gpuext_debugfs);
	gpuext_set_registry(NULL);
	/* Contexts without migrate ops freed by call_srcu: run their callbacks before the text goes. */
	srcu_barrier(&gpuext_ctx_srcu);
}

module_init(gpuext_init);
module_exit(gpuext_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("gpuext core: GPU memory struct_ops, request kfuncs, tenant attribution");
