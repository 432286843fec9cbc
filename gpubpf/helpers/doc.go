// Package helpers owns the device-side helper library of gpuext device
// probes: helpers.cu implements the map and ringbuf helpers
// (abi.FuncMapLookup, abi.FuncMapUpdate, abi.FuncMapDelete,
// abi.FuncRingbufOut) over the device map layouts of gpuext_abi.h, and
// build.sh compiles it with nvcc to helpers.ptx, which this package embeds.
// PTX returns the library as a module fragment (no .version/.target/
// .address_size lines) together with the PTX ISA version and target it was
// built for, for the translator to append to every probe module.
package helpers
