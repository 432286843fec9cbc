// Package hook is the Docker/runc/podman admission path of gpuext. It turns
// what an OCI runtime shows of a container into calls of the host agent,
// which runs the one admission core (internal/admission); it imports only
// the agent's API (internal/agentapi) and small pure packages:
//
//   - the OCI hook (gpuext-oci-hook): reads the OCI State from stdin and the
//     bundle's config.json; createRuntime/prestart -> Register (the cgroup
//     exists, the user's process has not run), poststop -> Remove.
//   - the runc wrapper (gpuext-runc): on `create`/`run` it reads the bundle's
//     config.json and the container's Docker labels (from dockerd's
//     config.v2.json, never from the daemon), calls Admit, writes the
//     injection (read-only mounts, env with LD_PRELOAD) and the gpuext hook
//     entries into config.json, then executes the real runc with the
//     original arguments. Every other runc command goes through untouched.
//
// Decisions (argv parsing, state validation, config.json edits) are pure
// functions with table tests; the binaries in oci-hook/cmd are thin mains.
package hook
