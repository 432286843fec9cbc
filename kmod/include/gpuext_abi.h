/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * gpuext_abi.h - the one ABI header of gpuext.
 *
 * Everything that crosses the boundary between the control plane (Go), the
 * BPF programs, the gpuext kernel module and the device runtime is defined
 * here and nowhere else.  Go gets these types through bpf2go -type (see
 * bpf/gen.go); the kernel module and the BPF programs include this file.
 *
 * Rules for editing:
 *   - fixed-width types only, explicit padding, no pointers;
 *   - append fields at the end of a struct and bump GPUEXT_ABI_VERSION;
 *   - every struct here is used by at least one map or context, so bpf2go
 *     can see it.
 */
#ifndef GPUEXT_ABI_H
#define GPUEXT_ABI_H

#ifdef __KERNEL__
#include <linux/types.h>
#elif defined(__bpf__)
/* BPF programs include vmlinux.h or linux/types.h before this header. */
#else
#include <stdint.h>
typedef uint8_t __u8;
typedef uint16_t __u16;
typedef uint32_t __u32;
typedef uint64_t __u64;
typedef int32_t __s32;
typedef int64_t __s64;
#endif

/* Bumped on any incompatible change to a struct below. */
#define GPUEXT_ABI_VERSION 1

/* Fixed string sizes of the control-plane records (NUL terminated). */
#define GPUEXT_KEY_LEN 128
#define GPUEXT_NAME_LEN 64
#define GPUEXT_MAX_PROBES 8
#define GPUEXT_MAX_TENANTS 4096
#define GPUEXT_MAX_CGROUPS 16384

/* Priority classes, most urgent first (enum gpuext_priority_class): one numbering with the device runtime. */
#include "gpuext_prio.h"

/* Eviction policies a tenant may name (memory struct_ops by id). */
enum gpuext_eviction_policy {
	GPUEXT_EVICT_DEFAULT = 0, /* the driver's stock behaviour (LRU) */
	GPUEXT_EVICT_LRU = 1,
	GPUEXT_EVICT_FIFO = 2,
	GPUEXT_EVICT_LFU = 3,
	GPUEXT_EVICT_MRU = 4,
	GPUEXT_EVICT_TENANT_QUOTA = 5,
	GPUEXT_EVICT_PRIORITY_WEIGHTED = 6,
	GPUEXT_EVICT_FREQ_DECAY = 7, /* appended */
};

/* Prefetch policies a tenant may name. */
enum gpuext_prefetch_policy {
	GPUEXT_PREFETCH_DEFAULT = 0, /* the driver's stock behaviour */
	GPUEXT_PREFETCH_NONE = 1,
	GPUEXT_PREFETCH_ALWAYS_MAX = 2,
	GPUEXT_PREFETCH_TREE_THRESHOLD = 3,
	GPUEXT_PREFETCH_SEQUENTIAL = 4,
	GPUEXT_PREFETCH_STRIDE = 5,
};

/*
 * A memory policy that none of the two enums above names (one from the
 * host's kernel policy directory, docs/write-a-policy.md) is named in
 * eviction_policy or prefetch_policy by its id: GPUEXT_POLICY_NAMED | the
 * low 31 bits of the FNV-1a 32-bit hash of its ops name (the bytes before
 * the NUL).  The core computes the id of every attached memory ops (debugfs
 * ops lists it) and refuses a second ops with the same id.
 */
#define GPUEXT_POLICY_NAMED 0x80000000u
#define GPUEXT_FNV32_OFFSET 2166136261u
#define GPUEXT_FNV32_PRIME 16777619u

/* Bits of gpuext_tenant_config.flags. */
enum gpuext_tenant_flags {
	GPUEXT_TENANT_F_QUOTA = 1 << 0,      /* quota_bytes is enforced */
	GPUEXT_TENANT_F_FAIL_OPEN = 1 << 1,  /* policy fell back to default after a bad request */
};

/*
 * The tenant config: what the driver hooks, the BPF policies and the device
 * runtime see for a GPU context.  Value of the cgroup map (keyed by the
 * cgroup v2 id that bpf_get_current_cgroup_id() returns).
 */
struct gpuext_tenant_config {
	__u32 abi_version;       /* GPUEXT_ABI_VERSION of the writer */
	__u32 tenant_id;         /* small integer allocated by the registry, never 0 */
	__u32 flags;             /* enum gpuext_tenant_flags */
	__u32 priority_class;    /* enum gpuext_priority_class */
	__u32 timeslice_us;      /* TSG timeslice; 0 = driver default */
	__u32 interleave;        /* runlist interleave level; 0 = driver default */
	__u32 eviction_policy;   /* enum gpuext_eviction_policy */
	__u32 prefetch_policy;   /* enum gpuext_prefetch_policy */
	__u64 quota_bytes;       /* device-memory quota; 0 = unlimited */
	__u64 eviction_param;    /* policy parameter (e.g. LFU decay, weight) */
	__u64 prefetch_param;    /* policy parameter (e.g. tree threshold %, stride) */
	__u32 probe_count;       /* number of valid entries in probe_ids */
	__u32 probe_ids[GPUEXT_MAX_PROBES]; /* device probes by id (devrt) */
	__u32 _pad;
};

/* Per-tenant counters (tenant_stats map), written by the driver hooks and devrt. */
struct gpuext_tenant_stats {
	__u64 faults;
	__u64 pages_in;
	__u64 pages_out;
	__u64 evictions;
	__u64 prefetched_pages;
	__u64 alloc_bytes;
	__u64 peak_bytes;
	__u64 refused_allocs;
	__u64 delayed_launches;
	__u64 launches;
};

/*
 * Control-plane records (never read by the kernel): what the CLI shows and
 * what lets a restarted agent know who owns what.  They live in pinned maps
 * next to the config so nothing is lost when a process restarts.
 */

/* tenants map: tenant id -> record. */
struct gpuext_tenant_record {
	char key[GPUEXT_KEY_LEN];          /* tenant key, e.g. "ctr/<id>" or "pod/<uid>" */
	char policy[GPUEXT_NAME_LEN];      /* catalog policy name */
	__u64 created_ns;                  /* CLOCK_REALTIME at reservation */
	struct gpuext_tenant_config config;
};

/* tenant_keys map key: the tenant key string. */
struct gpuext_tenant_key {
	char key[GPUEXT_KEY_LEN];
};

/* cgroup_meta map: cgroup id -> who this cgroup is. */
struct gpuext_cgroup_meta {
	__u32 tenant_id;
	__u32 runtime;                     /* 1 = nri, 2 = oci hook, 3 = runc wrapper */
	__u64 registered_ns;
	char container_id[GPUEXT_KEY_LEN];
	char container_name[GPUEXT_NAME_LEN];
	char pod_name[GPUEXT_NAME_LEN];
	char pod_namespace[GPUEXT_NAME_LEN];
	char cgroup_path[GPUEXT_KEY_LEN * 2];
};

/*
 * Hook contexts (kernel -> memory struct_ops, see gpuext_ops.h).  The core
 * fills them; a policy reads them through BTF and asks for changes only
 * through the request kfuncs, which the core validates.
 */

#define GPUEXT_OPS_NAME_LEN 16          /* struct gpuext_mem_ops.name, NUL terminated */
#define GPUEXT_EVICT_MAX_CANDIDATES 32  /* chunks one evict_prepare call may reorder */

/* Return codes of the memory hooks. */
enum gpuext_hook_ret {
	GPUEXT_RET_DEFAULT = 0, /* keep the driver's stock behaviour */
	GPUEXT_RET_HANDLED = 1, /* the policy's requests stand */
};

/*
 * One eviction candidate (a root chunk) as the driver describes it.
 *
 * access_count counts the accesses while the chunk is resident, the one
 * that made it resident included: a chunk brought in by a fault has 1
 * after that fault, one made resident without an access (migrated ahead
 * of a fault; gpusim's alloc) has 0 until it is touched.  A chunk that
 * leaves and comes back starts again.  A driver that does not count
 * accesses reports 0 for every chunk (the NVIDIA patch series does).
 */
struct gpuext_chunk_info {
	__u64 chunk_id;     /* driver chunk id */
	__u64 alloc_seq;    /* when the chunk became resident (arrival order) */
	__u64 access_seq;   /* last access */
	__u64 access_count; /* accesses while resident, the faulting one included (above) */
};

/*
 * evict_prepare: candidates in the driver's list order.  The policy reorders
 * them with bpf_gpuext_evict_move_to_front(); cand[0] is evicted first.
 */
struct gpuext_evict_ctx {
	__u64 cgroup_id;     /* cgroup of the task that created the GPU context */
	__u32 tenant_id;     /* 0 when the cgroup is not registered */
	__u32 nr_candidates; /* valid entries in cand */
	__u32 requests;      /* requests the policy made in this call */
	__u32 refused;       /* requests the core refused in this call */
	struct gpuext_chunk_info cand[GPUEXT_EVICT_MAX_CANDIDATES];
};

/*
 * prefetch: a fault at fault_page inside the allowed region [region_first,
 * region_last]; the policy may ask for a sub-region with
 * bpf_gpuext_prefetch_set_region().  Pages are 4 KiB indices in a VA block.
 */
struct gpuext_prefetch_ctx {
	__u64 cgroup_id;
	__u32 tenant_id;
	__u32 fault_page;
	__u32 region_first;
	__u32 region_last;
	__u32 result_first;  /* the chosen region, set by the core */
	__u32 result_last;
	__u32 requests;
	__u32 refused;
	/* ==== appended: cross-block migration (bpf_gpuext_migrate_range) ==== */
	__u64 ctx_id;        /* core: the GPU context's id (never reused) */
	__u64 va_block;      /* driver: the faulting VA block (gpusim: its index; NVIDIA: start >> 21) */
};

/*
 * ==== memory: tenant arbitration (appended for the memory side) ====
 *
 * When device memory is full the driver asks which GPU context gives up a
 * chunk; that context's own eviction ops then choose which chunk.  The
 * system ops (debugfs gpuext/system names it) arbitrates across tenants:
 * each candidate is one context holding device memory.
 */

/* One context that holds device memory, as the arbitration sees it. */
struct gpuext_evict_owner {
	__u64 cgroup_id;             /* driver: the context's cgroup */
	__u64 resident_bytes;        /* driver: device memory this context holds */
	__u64 access_seq;            /* driver: last access of its least recent chunk */
	__u64 tenant_resident_bytes; /* core: resident_bytes summed over the tenant's candidates */
	__u64 quota_bytes;           /* core: the tenant's quota when GPUEXT_TENANT_F_QUOTA, else 0 */
	__u32 tenant_id;             /* core: 0 when the cgroup is not registered */
	__u32 priority_class;        /* core: the tenant's enum gpuext_priority_class (standard if none) */
};

/* evict_arbitrate: pick the context to evict from with bpf_gpuext_arbitrate_pick(). */
struct gpuext_arbitrate_ctx {
	__u32 nr_candidates; /* valid entries in cand */
	__u32 picked;        /* index the policy picked, set by the core; ~0 = none */
	__u32 requests;
	__u32 refused;
	struct gpuext_evict_owner cand[GPUEXT_EVICT_MAX_CANDIDATES];
};

/*
 * ==== memory: block notifications (appended for the memory side) ====
 *
 * block_activate: a VA block got a root chunk (became resident);
 * block_access: a touch of a VA block that holds one.  They run the
 * tenant's eviction ops and carry no requests: a policy keeps what it
 * learns in its own maps.
 */
struct gpuext_block_ctx {
	__u64 cgroup_id;      /* core */
	__u64 chunk_id;       /* driver: the root chunk (gpusim: the VA block index) */
	__u64 access_count;   /* driver: counted as gpuext_chunk_info's; block_access: the touches before this one,
			       * block_activate: the fault that made it resident included */
	__u32 tenant_id;      /* core: 0 when the cgroup is not registered */
	__u32 va_block;       /* driver: VA block index in the context */
	__u32 page;           /* driver: page touched (access) or faulting (activate) */
	__u32 resident_pages; /* driver: pages of the block resident */
};

/*
 * ==== memory: the prefetch tree, node by node (appended) ====
 *
 * prefetch_node: the stock prefetch walks a tree of aligned regions around
 * the faulting page (2, 4, ... pages up to the allowed region) and takes the
 * largest node whose occupancy passes its threshold.  When the tenant's
 * prefetch ops did not choose the region in prefetch, the driver asks this
 * hook at each node; the policy answers with
 * bpf_gpuext_prefetch_node_take(ctx, 1 or 0), which the core refuses for a
 * node outside the allowed region or without the faulting page.  No answer
 * keeps the stock rule for that node.
 */
struct gpuext_prefetch_node_ctx {
	__u64 cgroup_id;    /* core */
	__u64 ctx_id;       /* core */
	__u64 va_block;     /* driver */
	__u32 tenant_id;    /* core: 0 when the cgroup is not registered */
	__u32 fault_page;   /* driver */
	__u32 node_first;   /* driver: the node's pages [node_first, node_last] */
	__u32 node_last;
	__u32 level;        /* driver: 0 for the smallest node (2 pages), +1 per doubling */
	__u32 counter;      /* driver: pages of the node resident or faulting */
	__u32 region_first; /* driver: the allowed region */
	__u32 region_last;
	__u32 take;         /* core: the accepted answer (1 take the node, 0 do not) */
	__u32 requests;
	__u32 refused;
	__u32 _pad;
};

/*
 * bpf_gpuext_migrate_range (sleepable, from a BPF workqueue callback): ask
 * the driver to migrate pages [first, last] of VA block va_block of GPU
 * context ctx_id to the device ahead of any fault.  The core refuses a
 * context that is gone or whose driver cannot migrate (-ENOENT,
 * -EOPNOTSUPP), a context whose tenant is not tenant_id or has no prefetch
 * policy attached (-EPERM), and a range past the driver's limits (-ERANGE).
 */
#define GPUEXT_MIGRATE_MAX_PAGES 512

/* ==== SCHEDULING (TSG runlist; sched struct_ops in gpuext_ops.h) ========== */

/* Bounds the core enforces on a policy's requests (bpf_gpuext_tsg_set_*). */
#define GPUEXT_TIMESLICE_MIN_US 100
#define GPUEXT_TIMESLICE_MAX_US 10000000
#define GPUEXT_INTERLEAVE_MIN 1
#define GPUEXT_INTERLEAVE_MAX 64

/* Bit of gpuext_sched_ops.classes for an enum gpuext_priority_class. */
#define GPUEXT_SCHED_CLASS(prio) (1u << (prio))
#define GPUEXT_SCHED_CLASS_ALL 0x7u

/* Return codes of tsg_bind.  Anything else is an error: the context is admitted (stock). */
enum gpuext_bind_ret {
	GPUEXT_BIND_ADMIT = 0,
	GPUEXT_BIND_REFUSE = 1,
};

/*
 * tsg_init / tsg_bind / tsg_destroy: one TSG (a GPU context's channel group
 * on the runlist).  The driver fills timeslice_us and interleave with its
 * stock values; the core fills the rest from the context's cgroup and
 * tenant config.  A policy asks for other values with
 * bpf_gpuext_tsg_set_timeslice() / bpf_gpuext_tsg_set_interleave().
 */
struct gpuext_tsg_ctx {
	__u64 cgroup_id;        /* cgroup of the task that created the GPU context */
	__u64 tsg_id;           /* unique per TSG, set by the core at init */
	__u32 tenant_id;        /* 0 when the cgroup is not registered */
	__u32 priority_class;   /* tenant config priority_class */
	__u32 cfg_timeslice_us; /* tenant config timeslice_us (0 = not configured) */
	__u32 cfg_interleave;   /* tenant config interleave (0 = not configured) */
	__u32 timeslice_us;     /* in: driver stock; out: the value that applies */
	__u32 interleave;       /* in: driver stock; out: the value that applies */
	__u32 requests;         /* requests the policy made in this call */
	__u32 refused;          /* requests the core refused in this call */
};

/*
 * ==== scheduling: preemption (appended) ====
 *
 * tsg_submit: a TSG has work to run (the driver's work-submit path).  The
 * policy may ask the driver to preempt other TSGs with
 * bpf_gpuext_tsg_preempt(ctx, tsg_id); the core refuses the TSG itself, a
 * TSG it does not know, one whose tenant's priority class is not strictly
 * less urgent than this TSG's, and more than GPUEXT_MAX_PREEMPT requests.
 * The driver preempts the accepted ones after the hook returns, and only
 * when no request of the call was refused.
 */
#define GPUEXT_MAX_PREEMPT 4

struct gpuext_tsg_submit_ctx {
	__u64 cgroup_id;       /* core */
	__u64 tsg_id;          /* the submitting TSG (its gpuext_tsg_ctx.tsg_id) */
	__u32 tenant_id;       /* core */
	__u32 priority_class;  /* core: the tenant's class */
	__u32 nr_preempt;      /* core: accepted requests in preempt */
	__u32 requests;
	__u32 refused;
	__u32 _pad;
	__u64 preempt[GPUEXT_MAX_PREEMPT]; /* core: tsg ids the driver preempts */
};

/* ==== DEVICE PROBES (eBPF run inside GPU kernels; docs/device-probes.md) ==== */

/*
 * A device probe is an eBPF program in ELF section GPUEXT_PROBE_SEC_* that
 * gpubpf/ verifies and translates to PTX; the interposer splices a call
 * to it into every probed .entry of a module as the module loads.  The same
 * program text runs in the kernel through BPF_PROG_TEST_RUN in CI (the
 * differential test), so kernel helper numbers are kept where they exist.
 */
#define GPUEXT_PROBE_SEC_ENTRY "gpuext/kernel_entry" /* first instruction of the kernel, every thread */
#define GPUEXT_PROBE_SEC_EXIT "gpuext/kernel_exit"   /* before each ret/exit of the kernel, every thread */

enum gpuext_probe_attach {
	GPUEXT_PROBE_KERNEL_ENTRY = 0,
	GPUEXT_PROBE_KERNEL_EXIT = 1,
};

/* The probe's context (r1), read-only, built per thread by the dispatch stub. */
struct gpuext_probe_ctx {
	__u64 kernel_id;   /* FNV-1a 64 of the .entry's (mangled) name */
	__u32 tenant_id;   /* the tenant the process belongs to (0 = unknown) */
	__u32 attach;      /* enum gpuext_probe_attach */
	__u64 launch_ns;   /* host CLOCK_REALTIME at cuLaunchKernel, 0 unless the module asks for it */
};

/*
 * Helpers.  Kernel numbers where the kernel has the helper (so differential
 * programs run unchanged under BPF_PROG_TEST_RUN); device-only helpers from
 * GPUEXT_PH_BASE.  Ids and dims are u32 zero-extended into r0.
 */
#define GPUEXT_PH_MAP_LOOKUP_ELEM 1   /* bpf_map_lookup_elem */
#define GPUEXT_PH_MAP_UPDATE_ELEM 2   /* bpf_map_update_elem */
#define GPUEXT_PH_MAP_DELETE_ELEM 3   /* bpf_map_delete_elem (hash) */
#define GPUEXT_PH_KTIME_GET_NS 5      /* bpf_ktime_get_ns -> %globaltimer */
#define GPUEXT_PH_SMP_PROCESSOR_ID 8  /* bpf_get_smp_processor_id -> %smid */
#define GPUEXT_PH_RINGBUF_OUTPUT 130  /* bpf_ringbuf_output */
#define GPUEXT_PH_BASE 2000
#define GPUEXT_PH_THREAD_IDX 2001     /* (dim 0..2) -> %tid.{x,y,z} */
#define GPUEXT_PH_BLOCK_IDX 2002      /* (dim) -> %ctaid.{x,y,z} */
#define GPUEXT_PH_BLOCK_DIM 2003      /* (dim) -> %ntid.{x,y,z} */
#define GPUEXT_PH_GRID_DIM 2004       /* (dim) -> %nctaid.{x,y,z} */
#define GPUEXT_PH_WARP_ID 2005        /* linear thread index in block / 32 */
#define GPUEXT_PH_LANE_ID 2006        /* %laneid */
#define GPUEXT_PH_SM_ID 2007          /* %smid */
#define GPUEXT_PH_GLOBALTIMER 2008    /* %globaltimer, ns */
#define GPUEXT_PH_BLOCK_LINEAR_ID 2009 /* linear block index in the grid */
#define GPUEXT_PH_THREAD_LINEAR_ID 2010 /* linear thread index in the block */
#define GPUEXT_PH_GLOBAL_THREAD_ID 2011 /* block_linear_id * threads per block + thread_linear_id */

/*
 * bpftime's flavour.  A program in section GPUEXT_PROBE_SEC_KPROBE "KERNEL"
 * (entry) or GPUEXT_PROBE_SEC_KRETPROBE "KERNEL" (exit) is a bpftime-style
 * GPU program: it runs only in .entry KERNEL (its kernel id is tested in the
 * dispatch), every thread of it is an event (side effects in every lane are
 * allowed where they cannot race; docs/device-probes.md), and it may call
 * bpftime's GPU helper numbers and the host helpers below, and use bpftime's
 * GPU map types.  The numbers are bpftime's; what they do here is gpuext's.
 */
#define GPUEXT_PROBE_SEC_KPROBE "kprobe/"       /* + .entry name: kernel entry */
#define GPUEXT_PROBE_SEC_KRETPROBE "kretprobe/" /* + .entry name: kernel exit */

#define GPUEXT_BT_PUTS 501          /* (str) -> 0: dropped on the device (no host round trip) */
#define GPUEXT_BT_GLOBALTIMER 502   /* () -> %globaltimer */
#define GPUEXT_BT_BLOCK_IDX 503     /* (u64 *x, *y, *z) -> 0, *x..*z = %ctaid */
#define GPUEXT_BT_BLOCK_DIM 504     /* (u64 *x, *y, *z) -> 0, %ntid */
#define GPUEXT_BT_THREAD_IDX 505    /* (u64 *x, *y, *z) -> 0, %tid */
#define GPUEXT_BT_MEMBAR 506        /* () -> 0, membar.sys */
#define GPUEXT_BT_EXIT 507          /* ends the kernel's thread: refused (a probe must not change the kernel) */
#define GPUEXT_BT_GRID_DIM 508      /* (u64 *x, *y, *z) -> 0, %nctaid */
#define GPUEXT_BT_SM_ID 509         /* () -> %smid */
#define GPUEXT_BT_WARP_ID 510       /* () -> %warpid (the hardware warp slot, as bpftime) */
#define GPUEXT_BT_LANE_ID 511       /* () -> %laneid */
/* Kernel helpers that need the host in the kernel, defined for the device: */
#define GPUEXT_BT_TRACE_PRINTK 6    /* bpf_trace_printk (bpf_printk) -> 0: dropped */
#define GPUEXT_BT_PID_TGID 14       /* bpf_get_current_pid_tgid -> __gpuext_pid_tgid (the interposer's) */
#define GPUEXT_BT_PERF_OUTPUT 25    /* bpf_perf_event_output(ctx, map, flags, data, size) -> ringbuf_output */

/* bpftime's GPU map types (the map's BTF "type"), as gpuext holds them. */
#define GPUEXT_BT_MAP_GPU_HASH 1501          /* -> GPUEXT_DMAP_HASH */
#define GPUEXT_BT_MAP_PER_THREAD 1502        /* PERGPUTD_ARRAY -> GPUEXT_DMAP_PER_THREAD */
#define GPUEXT_BT_MAP_GPU_ARRAY 1503         /* -> GPUEXT_DMAP_ARRAY */
#define GPUEXT_BT_MAP_KERNEL_SHARED 1504     /* GPU_KERNEL_SHARED_ARRAY -> GPUEXT_DMAP_ARRAY */
#define GPUEXT_BT_MAP_PER_THREAD_HOST 1512   /* PERGPUTD_ARRAY_HOST -> GPUEXT_DMAP_PER_THREAD */
#define GPUEXT_BT_MAP_GPU_ARRAY_HOST 1513    /* GPU_ARRAY_HOST -> GPUEXT_DMAP_ARRAY */
#define GPUEXT_BT_MAP_GPU_RINGBUF 1527       /* -> GPUEXT_DMAP_RINGBUF, one record per call, any lane */
/* A GPU ring buffer of max_entries records of value_size bytes per thread
 * becomes one log with room for that many records of GPUEXT_BT_RINGBUF_THREADS
 * threads: max_entries * (8 + round8(value_size)) * GPUEXT_BT_RINGBUF_THREADS bytes. */
#define GPUEXT_BT_RINGBUF_THREADS 256

/*
 * A device map lives in one .global symbol of the patched module,
 * __gpuext_map_<name>: this 32-byte descriptor, then the data.  The host
 * reads the whole symbol.  Entry layouts (stride = 8 + round8(value_size)
 * where an entry has a header word):
 *  ARRAY     max_entries x [u64 seq][value]: seq is odd while an update of a
 *            value larger than 8 bytes is in progress (a writer lock);
 *            values of <= 8 bytes are updated with one atomic exchange.
 *  HASH      buckets (next pow2 >= 2*max_entries) x
 *            [u32 state, u32 hash][key round8][value round8], then a u64
 *            count of live entries (a new key past max_entries: -E2BIG);
 *            state 0 empty, 1 being written, 2 live, 3 deleted.
 *  PER_WARP  slots x max_entries x [value round8] (no header word); a warp
 *            uses slot (%smid * 64 + %warpid) % slots; the host sums slots.
 *  PER_THREAD slots x max_entries x [value round8], then
 *            GPUEXT_DMAP_NOROW_STRIPES u64 counts, GPUEXT_DMAP_NOROW_STRIPE
 *            bytes apart, of lookups by threads without a slot (a warp counts
 *            in stripe %smid % STRIPES, so the warps of a launch do not all
 *            add at one address; the host sums them): thread g
 *            (GPUEXT_PH_GLOBAL_THREAD_ID) owns row g when g < slots
 *            (nbuckets), else its lookup is NULL;
 *            slots = map_extra when set (at most GPUEXT_DMAP_MAX_THREAD_SLOTS),
 *            else GPUEXT_DMAP_THREAD_SLOTS.
 *  RINGBUF   [u64 head][u64 dropped][max_entries bytes, to 8], then
 *            GPUEXT_DMAP_NOROW_STRIPES u64 drop counts GPUEXT_DMAP_NOROW_STRIPE
 *            bytes apart: an append log; records are [u32 len][u32 0][data
 *            round8], a record that does not fit is counted in dropped by the
 *            helper library, or, when a translated program sees the ring full
 *            before calling it, by the warp in stripe %smid % STRIPES; the
 *            host sums dropped and the stripes.
 */
enum gpuext_dmap_type {
	GPUEXT_DMAP_ARRAY = 1,    /* BPF_MAP_TYPE_ARRAY */
	GPUEXT_DMAP_HASH = 2,     /* BPF_MAP_TYPE_HASH */
	GPUEXT_DMAP_PER_WARP = 3, /* BPF_MAP_TYPE_PERCPU_ARRAY: one copy per warp slot */
	GPUEXT_DMAP_RINGBUF = 4,  /* BPF_MAP_TYPE_RINGBUF */
	GPUEXT_DMAP_PER_THREAD = 5, /* GPUEXT_MAP_TYPE_PER_THREAD: one row per thread of the launch */
};

#define GPUEXT_DMAP_HDR_SIZE 32
#define GPUEXT_DMAP_WARP_SLOTS 16384 /* 256 SMs x 64 warp slots */
#define GPUEXT_DMAP_THREAD_SLOTS 65536      /* PER_THREAD rows without map_extra */
#define GPUEXT_DMAP_MAX_THREAD_SLOTS 16777216 /* PER_THREAD rows at most */
#define GPUEXT_DMAP_NOROW_STRIPES 64 /* PER_THREAD: no-row counts (a power of 2) */
#define GPUEXT_DMAP_NOROW_STRIPE 256 /* PER_THREAD: bytes from one no-row count to the next */
/* The BTF map type of gpuext's per-thread array (BPF_MAP_TYPE_* numbers end
 * far below; bpftime's PERGPUTD_ARRAY, 1502, is the same map). */
#define GPUEXT_MAP_TYPE_PER_THREAD 1502

struct gpuext_dmap {
	__u32 type;        /* enum gpuext_dmap_type */
	__u32 key_size;
	__u32 value_size;
	__u32 max_entries; /* RINGBUF: data bytes */
	__u32 nbuckets;    /* HASH: buckets; PER_WARP: slots; else max_entries */
	__u32 stride;      /* bytes per entry (bucket, slot row) */
	__u64 data_size;   /* bytes after the descriptor */
};                         /* GPUEXT_DMAP_HDR_SIZE bytes */

#endif /* GPUEXT_ABI_H */
