package admission

import (
	"strconv"
	"strings"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/policies"
)

// selectPolicy validates the container's request against the catalog and
// the admin constraints; the error names the key (the fail mode is applied
// by Admit).
func (pl *Planner) selectPolicy(info ContainerInfo) (policies.Selection, error) {
	req := requestOf(info)
	sel, err := pl.catalog.Select(req)
	if err == nil && pl.constraints != nil {
		err = pl.constraints.Check(req, sel)
	}
	if err != nil {
		return policies.Selection{}, err
	}
	return sel, nil
}

// The tenant key names a tenant in the registry: RUNTIME/ctr/ID for a
// container's own tenant, RUNTIME/pod/UID (else RUNTIME/pod/NAMESPACE/NAME)
// for a pod's. These functions are the only ones that spell it.
const (
	keyContainer = "/ctr/"
	keyPod       = "/pod/"
)

// tenantKey is the key of the tenant a selection puts the container in.
func tenantKey(info ContainerInfo, sel policies.Selection) string {
	if sel.Tenant == policies.TenantPod {
		if key, ok := podTenantKey(info); ok {
			return key
		}
	}
	return containerTenantKey(info)
}

// containerTenantKey is the key of the container's own tenant.
func containerTenantKey(info ContainerInfo) string {
	return runtimePrefix(info.Runtime) + keyContainer + info.ID
}

// podTenantKey is the key of the container's pod's tenant; ok is false
// when the container has no pod.
func podTenantKey(info ContainerInfo) (key string, ok bool) {
	if info.PodUID == "" && info.PodName == "" {
		return "", false
	}
	id := info.PodUID
	if id == "" {
		id = info.PodNamespace + "/" + info.PodName
	}
	return runtimePrefix(info.Runtime) + keyPod + id, true
}

// isPodKey says whether key names a pod's tenant (of runtime r, when r is
// not 0).
func isPodKey(key string, r bpf.Runtime) bool {
	if r == 0 {
		return strings.Contains(key, keyPod)
	}
	return strings.HasPrefix(key, runtimePrefix(r)+keyPod)
}

func runtimePrefix(r bpf.Runtime) string {
	switch r {
	case bpf.RuntimeNRI:
		return "nri"
	case bpf.RuntimeOCIHook, bpf.RuntimeRuncWrapper:
		return "oci"
	}
	return "rt" + strconv.Itoa(int(r))
}
