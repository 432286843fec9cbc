/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/*
 * registry_maps.h - the gpuext tenant registry maps, declared once.
 *
 * Included by every BPF object that reads or writes the registry
 * (registry.bpf.c declares them for the Go control plane; policies and
 * probes include it so their map specs match and the Go loader can hand
 * them the pinned maps with CollectionOptions.MapReplacements).
 *
 * Map names are the pin names under the registry's pin directory
 * (/sys/fs/bpf/gpuext by default), LIBBPF_PIN_BY_NAME style, so a libbpf
 * loader pointed at that directory shares the same maps.
 */
#ifndef GPUEXT_REGISTRY_MAPS_H
#define GPUEXT_REGISTRY_MAPS_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "gpuext_abi.h"

/* cgroup v2 id -> tenant config: what the driver hooks and policies read. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GPUEXT_MAX_CGROUPS);
	__type(key, __u64);
	__type(value, struct gpuext_tenant_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} gpuext_cgroups SEC(".maps");

/* cgroup v2 id -> who registered this cgroup (control plane only). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GPUEXT_MAX_CGROUPS);
	__type(key, __u64);
	__type(value, struct gpuext_cgroup_meta);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} gpuext_cg_meta SEC(".maps");

/* tenant id -> record (key, policy, config); control plane only. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GPUEXT_MAX_TENANTS);
	__type(key, __u32);
	__type(value, struct gpuext_tenant_record);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} gpuext_tenants SEC(".maps");

/* tenant key -> tenant id; the unique index that makes Reserve idempotent. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GPUEXT_MAX_TENANTS);
	__type(key, struct gpuext_tenant_key);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} gpuext_tenant_keys SEC(".maps");

/* tenant id -> counters, bumped by driver hooks, policies and probes. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GPUEXT_MAX_TENANTS);
	__type(key, __u32);
	__type(value, struct gpuext_tenant_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} gpuext_stats SEC(".maps");

#endif /* GPUEXT_REGISTRY_MAPS_H */
