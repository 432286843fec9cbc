// Package programs is the catalog of device probes: eBPF programs that run
// inside a tenant's GPU kernels (docs/device-probes.md), each with the
// catalog entry that a container selects it by (probes.gpuext.io). The
// built-in ones are C sources here, compiled with clang -target bpf
// (gen.go; the .o files are committed so a build needs no clang), with
// their entries in catalog/NAME.json (package catalog, the leaf the policy
// model imports for their names). An entry names its object, its programs,
// whether it needs the host launch time, and how the CLI renders its maps
// (views). gpubpf/compile verifies and translates the selected objects into
// the module the device runtime splices in, and devrt/probefiles/maps
// decodes what they counted through the views.
//
// The catalog is decoded strictly (an unknown field names the file and the
// field) and checked against the objects when it loads. An operator's probe
// directory (the config's probeDir: the same entries with their objects,
// built with the SDK) is loaded by LoadDir, which also runs every program
// through the device verifier, and joins the built-in catalog with With
// (docs/write-a-probe.md). The views' field layouts of hash keys, values
// and ring-buffer records are in layout.go. gpuext_probe.h and bpftime/
// are the headers device programs are written against (the SDK installs
// them).
package programs
