// Package testutil is the one home of the test helpers every layer shares
// (cilium/ebpf keeps its own the same way, in internal/testutils): the rule
// for privileged tests (SkipOrFail, RequireRoot: skip locally, fail when
// CI=true, so CI never passes by skipping), the repository root, the device
// runtime built once per test binary (devrt/build.sh: the interposer, the
// fake libcuda and libnvidia-ml, the test apps), gpuext-gpuview over that
// fake NVML, and device probes compiled with clang as the SDK's probe.mk
// does. Only tests and the labs' test helpers import it.
//
// Like everything under lib/, it imports nothing of the module outside
// lib/, so a package of any layer may use it without importing upward.
// Helpers that need a package of the module (a private tenant registry,
// a temporary cgroup) live beside that package: bpf/bpftest,
// cgroup/cgrouptest.
package testutil
