// Package ptx translates verified device-probe eBPF programs to PTX: the
// module fragment (map symbols, one .func per program, the dispatch
// functions the patcher calls) and its manifest, per docs/device-probes.md.
//
// The translation is one PTX instruction sequence per eBPF instruction,
// with eBPF's exact semantics: 32-bit ALU results are zero-extended,
// division by zero gives 0, modulo by zero leaves the dividend (truncated
// to 32 bits in ALU32), shift counts are masked, and every pointer is a
// generic address so loads, stores and atomics use generic ld/st/atom.
// Programs are also exported for the differential test (gpubpf/difftest)
// and the GPU corpus tool; map images and their decoding are gpubpf/devmap.
package ptx
