package bpf

import (
	"time"

	"github.com/gpuext/gpuext/bpf/ids"
	"github.com/gpuext/gpuext/cgroup"
)

// TenantID, Runtime and DefaultPinDir are package ids's: the registry's
// clients name them without linking BPF.
type (
	TenantID = ids.TenantID
	Runtime  = ids.Runtime
)

// DefaultPinDir is where the registry pins its maps.
const DefaultPinDir = ids.DefaultPinDir

const (
	RuntimeNRI         = ids.RuntimeNRI
	RuntimeOCIHook     = ids.RuntimeOCIHook
	RuntimeRuncWrapper = ids.RuntimeRuncWrapper
)

// CgroupEntry is one registered cgroup of a tenant.
type CgroupEntry struct {
	CgroupID      cgroup.ID
	CgroupPath    string
	ContainerID   string
	ContainerName string
	PodName       string
	PodNamespace  string
	Runtime       Runtime
}

// Tenant is one tenant as listed by the registry.
type Tenant struct {
	ID      TenantID
	Key     string
	Policy  string
	Config  GpuextTenantConfig // generated from kmod/include/gpuext_abi.h
	Cgroups []CgroupEntry
	// Created is when the tenant was reserved.
	Created time.Time
}
