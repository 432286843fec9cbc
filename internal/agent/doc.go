// Package agent serves the local API of the host agent (the
// gpuext-nri-plugin process); its types and client are package agentapi's:
// the runc wrapper and the OCI hooks are thin clients of it, as tetragon's
// runtime hooks are of tetragon. The agent owns the one admission
// core of the host (catalog, constraints, probe compile cache, registry,
// kernel hand-off, board, reconcile); a hook process sends it what it knows
// of a container and gets the decision back, instead of assembling a core of
// its own for every container.
//
// The API is JSON over HTTP on a unix socket that only root can reach: the
// socket is 0600 in a 0700 directory, and the server also checks the peer's
// uid (SO_PEERCRED). When the agent cannot be reached, the client's caller
// applies its fail mode (failmode.Apply): fail-open starts the container
// without gpuext, strict refuses it; both are logged.
package agent
