package agentapi

import "github.com/gpuext/gpuext/bpf/ids"

// ContainerInfo is what a runtime path knows about a container. It is the
// only input of the admission core (internal/admission), and what every
// API request carries.
type ContainerInfo struct {
	ID   string
	Name string

	// Pod identity; empty for Docker and plain runc/podman containers.
	PodName      string
	PodNamespace string
	PodUID       string

	Labels         map[string]string
	Annotations    map[string]string
	PodLabels      map[string]string
	PodAnnotations map[string]string

	// CgroupsPath is the OCI linux.cgroupsPath (cgroupfs or systemd form).
	CgroupsPath string
	// Pid is the container's init pid on the host, 0 when not known yet.
	Pid int
	// Env is the process env the container already has (for LD_PRELOAD appending).
	Env []string

	Runtime ids.Runtime

	// User is who the container's process runs as, where the runtime says
	// (NRI's container user and namespaces, the OCI config's process.user
	// and user namespace); the zero value is "not known".
	User ProcessUser
}

// ProcessUser is a container process's user as admission knows it.
type ProcessUser struct {
	Known  bool   // the runtime said who
	UID    uint32 // the uid in the container
	UserNS bool   // the container has a user namespace of its own
}

// HostRoot says whether the process may be the host's uid 0: uid 0 without
// a user namespace of its own, or a user that is not known. The MPS control
// daemon lets root change a running server's share (make gpu-test section
// mps-control), so this decides who gets its socket under mpsRootTenants deny.
func (u ProcessUser) HostRoot() bool { return !u.Known || (u.UID == 0 && !u.UserNS) }

// Mount is a bind mount to add to the container.
type Mount struct {
	Source      string
	Destination string
	Options     []string
}

// EnvVar is one environment variable to set in the container (final value).
type EnvVar struct {
	Key   string
	Value string
}

// Injection is what a runtime path adds to the container so the device
// runtime is loaded and finds its tenant.
type Injection struct {
	Mounts []Mount
	Env    []EnvVar
}

// PolicyChange asks the agent to change a running tenant's policy
// (gpuextctl tenants set-policy; admission.Core.SetPolicy).
type PolicyChange struct {
	// Tenant is the tenant's id ("7") or its key ("oci/ctr/ID", "nri/pod/UID").
	Tenant string `json:"tenant"`
	Policy string `json:"policy"`
	// Params are further keys of the request: "quota" or "quota.gpuext.io".
	Params map[string]string `json:"params,omitempty"`
}
