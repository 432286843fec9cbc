// Package agent serves the local API of the host agent (internal/hostagent,
// the gpuext-nri-plugin process); its types and client are package
// agentapi's: the runc wrapper and the OCI hooks are thin clients of it, as
// tetragon's runtime hooks are of tetragon, and so is gpuextctl for what
// the agent owns (set-policy, gc). The agent owns the one admission core of
// the host (catalog, constraints, probe compile cache, registry, kernel
// hand-off, board, reconcile); a hook process sends it what it knows of a
// container and gets the decision back, instead of assembling a core of its
// own for every container.
//
//	POST /v1/admit       the runc wrapper: admit a container
//	POST /v1/register    the OCI hook (createRuntime): register its cgroup
//	POST /v1/remove      the OCI hook (poststop): detach it
//	POST /v1/set-policy  gpuextctl tenants set-policy: change a running tenant's policy
//	POST /v1/gc          gpuextctl gc: one reconcile round now
//
// The API is JSON over HTTP on a unix socket that only root can reach: the
// socket is 0600 in a 0700 directory, and the server also checks the peer's
// uid (SO_PEERCRED). When the agent cannot be reached, the client's caller
// applies its fail mode (failmode.Apply): fail-open starts the container
// without gpuext, strict refuses it; both are logged.
package agent
