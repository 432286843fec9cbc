package cgroup

// ID is a cgroup v2 id: the inode number of the cgroup's directory in the v2
// hierarchy, which is what bpf_get_current_cgroup_id() returns.
type ID uint64

// Layout is how cgroups are mounted on a host.
type Layout int

const (
	LayoutUnknown Layout = iota
	LayoutV1             // controllers on v1 only, no v2 tree
	LayoutV2             // unified only
	LayoutHybrid         // v1 controllers plus a v2 tree (usually /sys/fs/cgroup/unified)
)

// Cgroup is a resolved container cgroup.
type Cgroup struct {
	// Path is the cgroup path inside the hierarchy, e.g. "/kubepods/besteffort/pod<uid>/<id>".
	Path string
	// V2Dir is the host directory of the cgroup in the v2 hierarchy (with the host-root prefix).
	V2Dir string
	// ID is the inode of V2Dir; 0 when the cgroup does not exist (yet).
	ID ID
}
