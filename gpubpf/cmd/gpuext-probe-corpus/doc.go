// Command gpuext-probe-corpus writes the differential corpus for the GPU
// check (test/gpu/probe_diff.cu): DIR/corpus.ptx, every corpus program of
// gpubpf/difftest translated into one standalone module with its
// harness entry and the helper library, and DIR/corpus.txt, per program the
// context in, and r0, the context out and the map contents the host
// kernel's BPF_PROG_TEST_RUN produced (plus the map bytes the executable
// device map spec produces, for probe_diff --strict). It runs the programs
// in the kernel, so it needs root; it is CGO_ENABLED=0-buildable.
//
//	sudo gpuext-probe-corpus --out DIR [--helpers gpubpf/helpers/helpers.ptx] [--n 360]
//
// Without --helpers it uses the helper library embedded by
// gpubpf/helpers (built by its build.sh).
package main
