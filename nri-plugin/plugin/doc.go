// Package plugin is the containerd NRI adapter of the gpuext host agent
// (internal/hostagent): handlers that turn NRI events into calls of the
// agent and its one admission core (internal/admission), and Run, which
// connects them to containerd's NRI socket. The agent's services (registry,
// board, reconcile, API, metrics, device plugin, memory guard) and their
// lifecycle are the agent's; on a Docker or podman host the agent runs
// without this adapter.
//
//	Configure            -> the agent reconfigures (the first call starts its services)
//	CreateContainer      -> Admit: one decision; policy, tenant, injection (mounts + env) as a ContainerAdjustment
//	StartContainer       -> Register the decision: cgroup id -> tenant in the pinned registry. containerd 2.x
//	                        creates the task, and so the cgroup, only here; the process has not run yet
//	RemoveContainer      -> Remove
//	Synchronize          -> rebuild the registry from the live containers, drop stale NRI entries
package plugin
