// Package admission is the one admission path of gpuext. Both the containerd
// NRI plugin and the Docker/runc/podman OCI hook turn what they know of a
// container into a ContainerInfo and call the same Core:
//
//   - Admit: labels/annotations -> validated policy (policies), a reserved
//     tenant (bpf registry), the tenant directory, and the injection (mounts
//     and env) for the device runtime. Called when the container is created,
//     before its process runs.
//   - Register: container -> cgroup -> cgroup id (cgroup), attached to the
//     tenant in the pinned registry. Called once the cgroup exists and before
//     the user's process runs.
//   - Remove: detach the cgroup and release the tenant when it has no cgroup left.
//   - Synchronize: rebuild the registry from the live containers of one
//     runtime and drop stale entries of that runtime.
//
// Neither runtime path re-implements selection, resolution or registration.
package admission
