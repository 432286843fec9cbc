// Package agentapi is the host agent's API as its clients see it: what a
// runtime path knows of a container (ContainerInfo), the one record of an
// admission decision (Decision), carried on the wire and in the
// gpuext.io/decision annotation alike, and the client that calls the agent
// over its unix socket. The runc wrapper, the OCI hook and gpuextctl import
// it; it imports nothing of the admission core (no catalog, no BPF), which
// is what keeps the hooks thin: a lint test (internal/agentapi/deps_test.go)
// fails when one of the hook binaries links a package of the core.
//
// When the agent cannot be reached the client's caller applies its fail
// mode (internal/failmode): fail-open starts the container without gpuext,
// strict refuses it; both are logged.
package agentapi
