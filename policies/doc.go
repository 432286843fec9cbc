// Package policies owns the gpuext policy model: what a tenant policy is
// (memory eviction/prefetch algorithms, quota, priority class, timeslice,
// interleave, device probes), the built-in catalog of named policies (JSON
// files under catalog/, embedded and readable by users), strict loading of
// user catalogs that add to or override it, the label/annotation grammar that
// selects and overrides a policy for one container (see README.md), and the
// admin constraints that say which namespaces may ask for what.
//
// The package is pure: no root, no kernel, no I/O beyond reading catalog and
// constraint files. It imports the standard library, the key grammar and,
// of the device toolchain, only the names of the built-in device probes
// (gpubpf/programs/catalog): the set a policy's probes are checked against
// is a ProbeSet that admission fills with the program catalog, so the
// model links neither the verifier nor cilium/ebpf (internal/agentapi's
// TestPolicyImports fails when it does). Every bad request is a *KeyError that names the key as
// the user wrote it and wraps one of the exported sentinel errors.
package policies
