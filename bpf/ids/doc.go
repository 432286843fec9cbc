// Package ids holds what a client of the tenant registry names without
// loading it: the typed tenant id, the runtime path that registered a
// cgroup, and where the registry is pinned. It imports nothing of BPF, so
// the OCI hook and the runc wrapper (thin clients of the agent) can use the
// same types as the registry (package bpf re-exports them) without linking
// cilium/ebpf.
package ids
