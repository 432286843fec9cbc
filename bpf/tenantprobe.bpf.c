// SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0)
//go:build ignore

/*
 * tenantprobe.bpf.c - a test probe proving the kernel reads the registry.
 *
 * A cgroup/sock_create program: whenever a process creates a socket it
 * looks up its cgroup v2 id (bpf_get_current_cgroup_id(), the key every
 * gpuext hook uses) in gpuext_cgroups, records which tenant it found for
 * that process in gpuext_probe_seen, and bumps the tenant's launches
 * counter in gpuext_stats.  It always allows the socket.
 *
 * The registry maps come from registry_maps.h and are replaced at load time
 * by the registry's pinned maps, so this program reads exactly what the Go
 * control plane wrote.  Used by the privileged tests and as the smallest
 * example of a program sharing the registry.
 */
#include "registry_maps.h"

/* What the probe saw for one process (by tgid). */
struct gpuext_probe_report {
	__u64 cgroup_id; /* bpf_get_current_cgroup_id() at the last hit */
	__u32 tenant_id; /* tenant found in gpuext_cgroups; 0 = none */
	__u32 hits;      /* sockets created by the process */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct gpuext_probe_report);
} gpuext_probe_seen SEC(".maps");

SEC("cgroup/sock_create")
int gpuext_tenant_probe(struct bpf_sock *sk)
{
	__u64 cg = bpf_get_current_cgroup_id();
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct gpuext_tenant_config *cfg;
	struct gpuext_probe_report *rep, fresh = {};
	__u32 tenant = 0;

	cfg = bpf_map_lookup_elem(&gpuext_cgroups, &cg);
	if (cfg) {
		tenant = cfg->tenant_id;
		struct gpuext_tenant_stats *st = bpf_map_lookup_elem(&gpuext_stats, &tenant);
		if (!st) {
			struct gpuext_tenant_stats zero = {};
			bpf_map_update_elem(&gpuext_stats, &tenant, &zero, BPF_NOEXIST);
			st = bpf_map_lookup_elem(&gpuext_stats, &tenant);
		}
		if (st)
			__sync_fetch_and_add(&st->launches, 1);
	}

	rep = bpf_map_lookup_elem(&gpuext_probe_seen, &tgid);
	if (!rep) {
		fresh.cgroup_id = cg;
		fresh.tenant_id = tenant;
		fresh.hits = 1;
		bpf_map_update_elem(&gpuext_probe_seen, &tgid, &fresh, BPF_ANY);
		return 1;
	}
	rep->cgroup_id = cg;
	rep->tenant_id = tenant;
	__sync_fetch_and_add(&rep->hits, 1);
	return 1;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
