// Package compile turns a set of catalog probes (gpubpf/programs) into the
// module the interposer splices into a tenant's GPU kernels: it loads each
// probe's ELF object, verifies it (gpubpf/verifier), merges the
// selected probes into one collection, translates it with the helper library
// (gpubpf/ptx, gpubpf/helpers) and renders the three files of the
// tenant directory's probes/ subdirectory: module.ptx, manifest.json and
// module.conf (the line format the C side reads; docs/device-probes.md).
//
// Compile caches bundles by probe set, so admission pays for a translation
// once per set; Bundle.WriteDir installs a bundle so a reader never sees
// files of two different bundles.
package compile
