// Package plugin is the gpuext host agent: the containerd NRI plugin, whose
// handlers turn NRI events into calls of the one admission core
// (internal/admission), and the long-running owner of what outlives a
// container event, on a containerd host and (--nri=false) on a Docker or
// podman host alike.
//
//	CreateContainer      -> Admit: one decision; policy, tenant, injection (mounts + env) as a ContainerAdjustment
//	StartContainer       -> Register the decision: cgroup id -> tenant in the pinned registry. containerd 2.x
//	                        creates the task, and so the cgroup, only here; the process has not run yet
//	RemoveContainer      -> Remove
//	Synchronize          -> rebuild the registry from the live containers, drop stale NRI entries
//
// Beside the handlers: the agent API for the runc wrapper and the OCI hooks
// (internal/agent), the priority board publisher (devrt/board), and the
// periodic reconcile (reconcileInterval).
package plugin
