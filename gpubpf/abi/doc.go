// Package abi is the device-eBPF ABI: what the device programs, every step
// of the toolchain (gpubpf) and the device runtime's interposer (devrt/lib)
// share. program.go: attach points and their ELF sections (gpuext's and
// bpftime's), helper numbers, the program context, the kernel id;
// maps.go: device map types and layouts; manifest.go: the compiled
// module's manifest. The numbers, file names and dispatch names are
// generated (abi_gen.go, by gen.go) from the DEVICE PROBES section of
// kmod/include/gpuext_abi.h, from devrt/lib/ptxpatch.h and from
// devrt/include/gpuext_devrt_probes.h, the headers the programs and the
// interposer are built with; the pipeline is described in
// docs/device-probes.md.
//
//	ELF (clang -target bpf) -> verifier -> ptx translator -> module.ptx + manifest.json
//	                                                   -> interposer splices at image load (C)
package abi
