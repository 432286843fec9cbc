// Package devrt is the device runtime: the C library (libgpuext-devrt.so,
// lib/) that admission injects into a container's processes with LD_PRELOAD.
// It enforces the tenant's device-memory quota across the tenant's processes
// (a shared usage file, include/gpuext_devrt_shm.h), clamps cuMemGetInfo and
// NVML to the quota, and holds back best-effort launches while
// latency-critical work is pending (the board). build.sh builds it with gcc,
// together with the fake libcuda and the test apps the tests here run
// against. docs/devrt.md is the contract.
package devrt
