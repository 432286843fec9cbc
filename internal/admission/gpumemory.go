package admission

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/policies"
)

// GPUMemorySource says what GPU memory the scheduler gave a container: the
// kubelet's own record of the devices it allocated (internal/deviceplugin
// asks its pod-resources API), never anything the pod wrote about itself.
type GPUMemorySource interface {
	// GPUMemory is the container's memory per GPU or, with wholePod, its
	// pod's (each device counted once over the pod's containers). A
	// container or pod that holds none of the resource has no GPUs.
	GPUMemory(info ContainerInfo, wholePod bool) (GPUMemory, error)
}

// GPUMemoryFloor is what a GPUMemorySource may also say: the least GPU
// memory the scheduler can have given a container, when GPUMemory fails
// (ok false: nothing says it was given any). Fail-open keeps a container at
// it rather than letting it run unlimited (gpuMemoryOrFloor).
type GPUMemoryFloor interface {
	GPUMemoryFloor(info ContainerInfo) (gm GPUMemory, ok bool)
}

// GPUMemory is the GPU memory a container or pod was given.
type GPUMemory struct {
	// Resource is the extended resource (gpuext.io/gpu-memory), for messages.
	Resource string
	// GPUs: the memory on each GPU, in GPU index order, which is the order
	// of the container's device ordinals: the quotas are per ordinal, never
	// per host index. With CDI devices the container has its GPUs' device
	// nodes only and CUDA numbers them from 0 in PCI bus order (the device
	// plugin sets CUDA_DEVICE_ORDER=PCI_BUS_ID, and UUIDs, never indices, in
	// CUDA_VISIBLE_DEVICES): host GPU 1 alone is ordinal 0. With the env
	// fallback, CUDA_VISIBLE_DEVICES lists the GPUs in the same order.
	GPUs []GPUShare
	// ContainerGPUs are the GPU indices of the container's own devices.
	ContainerGPUs []int
}

// GPUShare is the memory on one GPU.
type GPUShare struct {
	GPU   int // the GPU's NVML index on the node
	Bytes uint64
}

func (g GPUMemory) indices() []int {
	out := make([]int, 0, len(g.GPUs))
	for _, s := range g.GPUs {
		out = append(out, s.GPU)
	}
	return out
}

// SetGPUMemory makes src the source of every Kubernetes container's GPU
// memory request from now on: it becomes the tenant's quota on each GPU,
// which a quota key may lower, never raise. Call it before the core is
// shared (it is not synchronised with calls in flight); nil turns it off.
func (pl *Planner) SetGPUMemory(src GPUMemorySource) { pl.gpuMem = src }

// gpuMemory asks the source for a Kubernetes container's GPU memory; none
// without a source, or for a container that is not a pod's.
func (pl *Planner) gpuMemory(info ContainerInfo, sel policies.Selection) (GPUMemory, error) {
	if pl.gpuMem == nil || info.Runtime != bpf.RuntimeNRI || info.PodName == "" {
		return GPUMemory{}, nil
	}
	gm, err := pl.gpuMem.GPUMemory(info, sel.Tenant == policies.TenantPod)
	if err != nil {
		return GPUMemory{}, fmt.Errorf("gpu memory of container %q of pod %s/%s: %w", info.Name, info.PodNamespace, info.PodName, err)
	}
	return gm, nil
}

// gpuMemoryOrFloor is gpuMemory, except that in fail-open mode a lookup
// that fails (the kubelet down, a pod listed twice with other devices)
// never lifts what the scheduler reserved: a container the source's floor
// says was given GPU memory keeps that floor as its quota on each of its
// GPUs (floor true), logged. Strict mode, or no floor: the error.
func (pl *Planner) gpuMemoryOrFloor(info ContainerInfo, sel policies.Selection, log *logrus.Entry) (gm GPUMemory, floor bool, err error) {
	gm, err = pl.gpuMemory(info, sel)
	if err == nil || pl.failMode == FailClosed {
		return gm, false, err
	}
	src, ok := pl.gpuMem.(GPUMemoryFloor)
	if !ok {
		return gm, false, err
	}
	fl, ok := src.GPUMemoryFloor(info)
	if !ok {
		return gm, false, err
	}
	log.WithError(err).WithFields(logrus.Fields{"failMode": pl.failMode, "gpus": fl.indices(), "gpuQuotaBytes": fl.GPUs}).
		Warn("GPU memory the scheduler gave the container is not known: fail-open keeps it at the least it can have been given on each of its GPUs, never unlimited")
	return fl, true, nil
}

// gpuQuota is gpuMemoryOrFloor then applyGPUMemory: the GPU memory the
// scheduler gave the container becomes the selection's quota on each GPU.
func (pl *Planner) gpuQuota(info ContainerInfo, sel *policies.Selection, log *logrus.Entry) (TenantGPUs, bool, error) {
	gm, floor, err := pl.gpuMemoryOrFloor(info, *sel, log)
	if err != nil {
		return TenantGPUs{}, false, err
	}
	t, err := applyGPUMemory(sel, gm)
	return t, floor, err
}

// TenantGPUs is the per-GPU part of a tenant: the host GPU index and the
// quota of each device ordinal the container sees.
type TenantGPUs struct {
	GPUs   []int
	Quotas []uint64
	// Granted is what the scheduler gave on each GPU (the quota's
	// ceiling), kept in config.json so that a policy change keeps it
	// (grantedGPUMemory).
	Granted []uint64
}

// applyGPUMemory makes the request the tenant's quota on each GPU it was
// given. A quota the selection already has (quota.gpuext.io, or the
// catalog policy's) may lower it on every GPU, never raise it: a
// quota.gpuext.io above the request on some GPU is a request error naming
// the key; a catalog policy's quota above it is capped to the request. The
// policy's QuotaBytes becomes the largest per-GPU quota (the kernel-facing
// config holds one).
func applyGPUMemory(sel *policies.Selection, gm GPUMemory) (TenantGPUs, error) {
	if len(gm.GPUs) == 0 {
		return TenantGPUs{}, nil
	}
	if sel.Tenant == policies.TenantPod && len(gm.ContainerGPUs) > 0 && !slices.Equal(gm.ContainerGPUs, gm.indices()) {
		return TenantGPUs{}, fmt.Errorf("%w: %s=pod: this container was given %s on GPUs %v, its pod on GPUs %v: "+
			"the containers of a pod tenant see their GPUs as the same device ordinals only when each is given the same GPUs",
			errRequest, policies.KeyTenant, gm.Resource, gm.ContainerGPUs, gm.indices())
	}
	asked := sel.Policy.Memory.QuotaBytes
	key := sel.Sources[policies.KeyQuota]
	var t TenantGPUs
	var most uint64
	for _, s := range gm.GPUs {
		q := s.Bytes
		if asked > 0 && asked <= s.Bytes {
			q = asked
		} else if asked > 0 && key != "" {
			return TenantGPUs{}, fmt.Errorf("%w: %s=%q: above the %s of %s given on GPU %d: a quota may lower the request, never raise it",
				errRequest, key, sel.Policy.Memory.Quota, policies.FormatSize(s.Bytes), gm.Resource, s.GPU)
		}
		t.GPUs = append(t.GPUs, s.GPU)
		t.Quotas = append(t.Quotas, q)
		t.Granted = append(t.Granted, s.Bytes)
		most = max(most, q)
	}
	sel.Policy.Memory.QuotaBytes = most
	sel.Policy.Memory.Quota = policies.FormatSize(most)
	return t, nil
}

// grantedGPUMemory is the GPU memory the scheduler gave tenant id, as
// admission wrote it into the tenant's config.json (the host's file): a
// running container's grant does not change, so a policy change keeps it
// from there rather than asking the kubelet again by names the registry
// holds cut to its field size. A tenant written before gpuMemoryBytes
// existed keeps its quotas as the ceiling.
func (c *Core) grantedGPUMemory(id bpf.TenantID) (GPUMemory, error) {
	data, err := os.ReadFile(filepath.Join(c.tenantDir(id), TenantConfigFile))
	if err != nil {
		return GPUMemory{}, fmt.Errorf("tenant %d: the GPU memory it was given: %w", id, err)
	}
	var tf tenantcfg.File
	if err := json.Unmarshal(data, &tf); err != nil {
		return GPUMemory{}, fmt.Errorf("tenant %d config.json: %w", id, err)
	}
	granted := tf.GPUMemoryBytes
	if len(granted) == 0 {
		granted = tf.GPUQuotaBytes
	}
	if len(granted) != len(tf.GPUs) {
		return GPUMemory{}, fmt.Errorf("tenant %d config.json: %d GPUs, %d grants", id, len(tf.GPUs), len(granted))
	}
	gm := GPUMemory{Resource: "gpu memory", ContainerGPUs: tf.GPUs}
	for i, g := range tf.GPUs {
		gm.GPUs = append(gm.GPUs, GPUShare{GPU: g, Bytes: granted[i]})
	}
	return gm, nil
}
