// Package cgroup resolves a container to its cgroup and to the cgroup v2 id
// that the GPU policies are keyed by.
//
// It owns three things:
//
//   - layout detection: whether a host mounts cgroups as v1 only, v2 only, or
//     hybrid (v1 controllers plus a v2 tree, usually at /sys/fs/cgroup/unified);
//   - resolution: an OCI/NRI Linux.CgroupsPath (cgroupfs or systemd
//     "slice:prefix:name" form) or a host pid to a [Cgroup], whose [ID] is the
//     inode of the cgroup's v2 directory, the value bpf_get_current_cgroup_id()
//     returns for the cgroup's tasks;
//   - pid membership: the processes listed in a cgroup's cgroup.procs.
//
// Every path is read below a host-root prefix ([Resolver.HostRoot]), so the
// package is tested on fixture trees made of plain directories and files. On
// such trees the layout is detected by marker files (cgroup.controllers at a
// v2 root, cgroup.procs in a v1 hierarchy) instead of file system magic.
//
// The ids only exist in a v2 hierarchy: on a v1-only host paths still resolve
// but ids do not, and the errors wrap [ErrNoV2]. A cgroup that does not exist
// yet (NRI CreateContainer runs before runc makes it) resolves to its path with
// ID 0 and an error wrapping [ErrNotExist], so callers can retry later.
//
// /proc/PID/cgroup shows paths relative to the reader's cgroup namespace: the
// resolver must run in the host's cgroup namespace. Paths that climb out of
// the namespace ("/../x") are rejected.
//
// The package does no logging; callers decide what to log.
// Sub-package cgrouptest holds helpers for privileged tests of other packages.
package cgroup
