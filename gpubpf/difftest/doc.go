// Package difftest is the differential test of the device-probe
// translator: a deterministic corpus of eBPF programs (Corpus), each run in
// the host kernel through BPF_PROG_TEST_RUN (RunKernel) and through
// gpubpf/ptx + gpubpf/ptxinterp (RunDevice), with r0, the
// context bytes after the run and every map's contents compared (Compare).
// The GPU corpus tool (gpubpf/cmd/gpuext-probe-corpus) writes the same
// corpus, with the kernel's results, for test/gpu/probe_diff.cu.
//
// Why BPF_PROG_TYPE_SYSCALL: its context is a plain byte buffer the
// program may read and write at any aligned offset, BPF_PROG_TEST_RUN
// copies it in and back out, and the program may call the map helpers, so
// the same program text runs unchanged in the kernel and on the "device"
// (where r1 is a generic pointer to the same bytes). Syscall programs must
// be sleepable (BPF_F_SLEEPABLE); test_run returns only the low 32 bits of
// r0, so every corpus program also stores its full 64-bit r0 at ctx[0:8]
// and its registers r1-r8 at ctx[CtxRegs:], where the context comparison
// sees them.
//
// A corpus program the kernel verifier rejects is a generator bug: the
// test fails with the verifier log.
package difftest
