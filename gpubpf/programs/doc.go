// Package probes owns the built-in device probes: eBPF programs that run
// inside a tenant's GPU kernels (docs/device-probes.md). Each probe is a C
// source compiled with clang -target bpf (gen.go; the .o files are committed
// so a build needs no clang) and a catalog entry (catalog/NAME.json) that
// names its object, its programs, whether it needs the host launch time, and
// how the CLI renders its maps (views). A container selects probes with
// probes.gpuext.io (policies); gpubpf/compile verifies and translates
// the selected objects, and devrt/probefiles/maps decodes what they counted.
//
// The catalog is decoded strictly (an unknown field names the file and the
// field) and checked against the objects when it loads. An operator's probe
// directory (the config's probeDir: the same entries with their objects,
// built with the SDK) is loaded by LoadDir, which also runs every program
// through the device verifier, and joins the built-in catalog with With
// (docs/write-a-probe.md). The views' field layouts of hash keys, values
// and ring-buffer records are in layout.go.
package programs
