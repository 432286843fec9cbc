package admission

import (
	"errors"

	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/internal/agentapi"
	"github.com/gpuext/gpuext/internal/failmode"
	"github.com/gpuext/gpuext/policies"
)

// The fail mode and its rule are package failmode's (the hooks share them
// without importing the core); admission names them too.
type FailMode = failmode.Mode

const (
	// FailOpen starts the container with the default policy and logs the keyed error.
	FailOpen = failmode.Open
	// FailClosed refuses to create the container; the error names the key.
	FailClosed = failmode.Strict
)

// Paths of the injection contract inside the container (docs/injection.md).
const (
	ContainerDevrtDir  = "/run/gpuext/devrt"
	ContainerTenantDir = "/run/gpuext/tenant"
	ContainerAcctDir   = "/run/gpuext/acct"
	ContainerBoardDir  = "/run/gpuext/board"
	BoardFile          = "board"
	DevrtLibrary       = "libgpuext-devrt.so"
	TenantConfigFile   = tenantcfg.ConfigFileName
	// TenantProbesDir holds the tenant's compiled device probes
	// (module.ptx, module.conf, manifest.json; docs/device-probes.md).
	TenantProbesDir = abi.BundleDir
	// AcctProbesDir, under a tenant's accounting dir, is where the device
	// runtime writes its probes' status and map copies.
	AcctProbesDir = abi.BundleDir

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
	// ErrRefused wraps a bad request refused in strict mode (failmode.ErrRefused).
	ErrRefused = failmode.ErrRefused
	// ErrNoCgroup means the container's cgroup could not be resolved.
	ErrNoCgroup = errors.New("container cgroup not resolvable")
)

// What a runtime path knows of a container and what it adds to it are
// the agent API's types (agentapi), which the hooks share without the core.
type (
	ContainerInfo = agentapi.ContainerInfo
	ProcessUser   = agentapi.ProcessUser
	Mount         = agentapi.Mount
	EnvVar        = agentapi.EnvVar
	Injection     = agentapi.Injection
)

// requestOf is the container's request as policies selects by it.
func requestOf(c ContainerInfo) policies.Request {
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
