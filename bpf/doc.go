// Package bpf owns gpuext's eBPF: every BPF C source, its bpf2go bindings
// (generated, committed; regenerate with `go generate ./bpf`, which needs
// clang and libbpf headers) and the Go side of the state pinned under
// /sys/fs/bpf/gpuext.
//
// # The tenant registry
//
// A tenant is a set of cgroups (usually one container, or a pod) that
// share one GPU policy. The registry keeps it in five hash maps, declared
// once in registry_maps.h and pinned by name in the pin directory:
//
//	gpuext_cgroups      u64 cgroup id -> struct gpuext_tenant_config   read by the kernel side
//	gpuext_cg_meta      u64 cgroup id -> struct gpuext_cgroup_meta     who registered the cgroup
//	gpuext_tenants      u32 tenant id -> struct gpuext_tenant_record   key, policy, config
//	gpuext_tenant_keys  struct gpuext_tenant_key -> u32 tenant id      the unique key index
//	gpuext_stats        u32 tenant id -> struct gpuext_tenant_stats    counters
//
// The cgroup id is the cgroup v2 id that bpf_get_current_cgroup_id()
// returns, so a driver hook or policy finds its tenant config with one
// lookup. All structs come from kmod/include/gpuext_abi.h through bpf2go
// -type; abi.go gives them exported names (aliases, not copies).
//
// The pin directory must be on a bpf filesystem (ErrPinDir otherwise); it
// is made 0700 and every pin 0600. Pins made by a build with other map
// sizes or another GPUEXT_ABI_VERSION give ErrABIMismatch naming the map;
// remove the directory to reset.
//
// # Many writers, no lock
//
// The NRI plugin and many short-lived OCI hook processes write at once, so
// the registry uses no lock of any kind; every step is one atomic map
// operation and races are settled by the kernel:
//
//   - Reserve claims an id by inserting the tenant record with
//     BPF_NOEXIST, probing from a hash of the key through [1, 4*MaxTenants),
//     then maps the key to it with BPF_NOEXIST. Of writers racing for one
//     key exactly one insert of the key wins; the others delete the record
//     they claimed and use the winner's id.
//   - A tenant is live while its key maps to it. Release removes the key
//     first, then the cgroups, stats and record. Attach writes the cgroup
//     and then checks the tenant is still live, undoing its write if not,
//     so a cgroup never stays attached to a released tenant.
//   - Detach of a tenant's last cgroup releases the tenant; it removes the
//     key, looks for cgroups again and puts the key back if an Attach got in
//     between. A tenant only reserved, never attached, stays until
//     ReleaseTenant.
//   - The kernel has no compare-and-delete: removing a key uses
//     BPF_MAP_LOOKUP_AND_DELETE_ELEM and puts back a mapping that turned
//     out to belong to another tenant.
//
// A Reserve racing the release of its own tenant can return an id that is
// released right after; Attach then returns ErrNoTenant and Upsert retries.
// A process killed in the middle of an operation can leave a record
// without a key (shown by List, removed by ReleaseTenant or by the next
// Detach of one of its cgroups) or a key whose record is gone (dropped by
// the next Reserve of that key).
//
// # Strings
//
// Tenant keys, policy names and container ids must fit their fields
// (MaxKeyLen, MaxNameLen bytes); longer ones are an error naming the
// field. Container and pod names (63 bytes) and the cgroup path (255
// bytes) are display-only and are cut to fit at a UTF-8 boundary, without
// a marker.
//
// # Other programs on the same maps
//
// An object that includes registry_maps.h is loaded with
// ebpf.CollectionOptions{MapReplacements: reg.Maps().Replacements()} and
// then reads and writes the registry's pinned maps. tenantprobe.bpf.c, a
// cgroup/sock_create program that reports the tenant of each process
// creating a socket, is the smallest example (see LoadTenantProbe).
package bpf
