// Package devmap is the executable specification of device maps: the
// bytes of a map symbol (descriptor, then data, laid out per gpubpf/abi)
// and what the device helpers do to them (Image.Lookup, Update, Delete,
// RingbufOutput), per map type, with the errno values they return. The
// CUDA helper library (gpubpf/helpers) must leave the same bytes behind;
// the reference interpreter (gpubpf/ptxinterp) runs these operations as its
// helpers, the translator (gpubpf/ptx) builds a module's initial map images
// with them, and devrt/probefiles/maps decodes copied-out maps with
// Image.Entries.
package devmap
