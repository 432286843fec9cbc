// Package plugin is the gpuext containerd NRI plugin: handlers that turn NRI
// events into calls of the one admission core (internal/admission).
//
//	CreateContainer      -> Admit: policy, tenant, injection (mounts + env) as a ContainerAdjustment
//	StartContainer       -> Register: cgroup id -> tenant in the pinned registry. containerd 2.x
//	                        creates the task, and so the cgroup, only here; the process has not run yet
//	RemoveContainer      -> Remove
//	Synchronize          -> rebuild the registry from the live containers, drop stale NRI entries
package plugin
