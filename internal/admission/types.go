package admission

import (
	"errors"
	"fmt"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/policies"
)

// FailMode says what happens to a container whose GPU policy request is bad
// (unknown policy, malformed value, forbidden by the admin constraints).
type FailMode string

const (
	// FailOpen starts the container with the default policy and logs the keyed error.
	FailOpen FailMode = "fail-open"
	// FailClosed refuses to create the container; the error names the key.
	FailClosed FailMode = "strict"
)

// ParseFailMode accepts "fail-open" (the default when empty) or "strict".
func ParseFailMode(s string) (FailMode, error) {
	switch s {
	case "", string(FailOpen):
		return FailOpen, nil
	case string(FailClosed), "fail-closed":
		return FailClosed, nil
	}
	return "", fmt.Errorf("failMode %q: want %q or %q", s, FailOpen, FailClosed)
}

// Paths of the injection contract inside the container (docs/injection.md).
const (
	ContainerDevrtDir  = "/run/gpuext/devrt"
	ContainerTenantDir = "/run/gpuext/tenant"
	ContainerAcctDir   = "/run/gpuext/acct"
	ContainerBoardDir  = "/run/gpuext/board"
	BoardFile          = "board"
	DevrtLibrary       = "libgpuext-devrt.so"
	TenantConfigFile   = "config.json"
	// TenantProbesDir holds the tenant's compiled device probes
	// (module.ptx, module.conf, manifest.json; docs/device-probes.md).
	TenantProbesDir = "probes"
	// AcctProbesDir, under a tenant's accounting dir, is where the device
	// runtime writes its probes' status and map copies.
	AcctProbesDir = "probes"

	// TenantSettingsFile is what the device runtime reads in the tenant
	// dir (devrt/include/gpuext_devrt_tenant.h); config.json is its
	// human-readable view, which the device runtime does not read.
	TenantSettingsFile = tenantcfg.FileName

	// The env names come from devrt/include/gpuext_devrt_env.h (generated
	// into devrt/tenantcfg), the names the interposer's getenv reads.
	EnvTenantID     = tenantcfg.EnvTenantID
	EnvTenantDir    = tenantcfg.EnvTenantDir
	EnvTenantConfig = tenantcfg.EnvTenantConfig
	EnvDevrtDir     = tenantcfg.EnvDevrtDir
	EnvPolicy       = tenantcfg.EnvPolicy
	EnvTenantAcct   = tenantcfg.EnvTenantAcct
	EnvBoard        = tenantcfg.EnvBoard
	EnvLDPreload    = "LD_PRELOAD" // the dynamic loader's
)

// Sentinel errors callers test with errors.Is.
var (
	// ErrRefused wraps a bad request refused in strict mode.
	ErrRefused = errors.New("gpu policy request refused")
	// ErrNoCgroup means the container's cgroup could not be resolved.
	ErrNoCgroup = errors.New("container cgroup not resolvable")
)

// ContainerInfo is what a runtime path knows about a container. It is the
// only input of the admission core.
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

	Runtime bpf.Runtime

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

func (c ContainerInfo) request() policies.Request {
	return policies.Request{
		ContainerName:  c.Name,
		PodName:        c.PodName,
		PodNamespace:   c.PodNamespace,
		Labels:         c.Labels,
		Annotations:    c.Annotations,
		PodLabels:      c.PodLabels,
		PodAnnotations: c.PodAnnotations,
	}
}

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
