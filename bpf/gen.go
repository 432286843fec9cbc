package bpf

// Regenerate with `go generate ./bpf` (needs clang; the outputs are committed so `go build` does not).

//go:generate go tool bpf2go -tags linux -target bpfel -type gpuext_tenant_config -type gpuext_tenant_stats -type gpuext_tenant_record -type gpuext_tenant_key -type gpuext_cgroup_meta -type gpuext_abi_constants -type gpuext_priority_class -type gpuext_eviction_policy -type gpuext_prefetch_policy -type gpuext_tenant_flags registry registry.bpf.c -- -I../kmod/include -I/usr/include/x86_64-linux-gnu
//go:generate go tool bpf2go -tags linux -target bpfel -no-global-types -type gpuext_probe_report tenantprobe tenantprobe.bpf.c -- -I../kmod/include -I/usr/include/x86_64-linux-gnu
