// Package plugin is the gpuext containerd NRI plugin: handlers that turn NRI
// events into calls of the one admission core (internal/admission).
//
//	CreateContainer      -> Admit: policy, tenant, injection (mounts + env) as a ContainerAdjustment
//	PostCreateContainer  -> Register: the cgroup exists now; cgroup id -> tenant in the pinned registry
//	StartContainer       -> Register again only if PostCreate could not (idempotent)
//	RemoveContainer      -> Remove
//	Synchronize          -> rebuild the registry from the live containers, drop stale NRI entries
package plugin
