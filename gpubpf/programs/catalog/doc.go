// Package catalog holds the catalog entries of the device probes gpuext
// ships (NAME.json, one per probe; gpubpf/programs loads them with the
// objects they name) and the rules for probe names: what a name looks like,
// the built-in names, and the "unknown probe" error.
//
// It is the one package of gpubpf that the policy model imports, and it
// imports only the standard library: policies checks the probe names a
// policy selects against the built-in names here, or against the set
// admission gives it (gpubpf/programs.Catalog, with the host's probe
// directory), without linking the verifier, the PTX translator or
// cilium/ebpf. internal/agentapi's TestPolicyImports keeps it so.
package catalog
