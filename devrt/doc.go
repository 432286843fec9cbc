// Package devrt is the device runtime: the C library (libgpuext-devrt.so,
// lib/) that admission injects into a container's processes with LD_PRELOAD.
// It enforces the tenant's device-memory quota across the tenant's processes
// (a shared usage file, include/gpuext_devrt_shm.h), clamps cuMemGetInfo and
// NVML to the quota, and holds back best-effort launches while
// latency-critical work is pending (the board). build.sh builds it with gcc,
// together with the fake libcuda and the test apps the tests here run
// against. docs/devrt.md is the contract.
//
// It also splices device probes into the kernels as their images load:
// the modules it splices are compiled on the host by the device-eBPF
// toolchain (gpubpf/), and what the probes counted it writes to the
// tenant's acct dir, which devrt/probefiles/maps and .../launches read.
// The Go beside the C reads or writes the runtime's own files: board (the
// board layout), tenantcfg (the tenant settings), probefiles (the probe
// files). devrt imports gpubpf (its tests compile modules), never the
// other way.
package devrt
