package admission

import (
	"strconv"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/policies"
)

// selectPolicy validates the container's request against the catalog and
// the admin constraints; the error names the key (the fail mode is applied
// by Admit).
func (c *Core) selectPolicy(info ContainerInfo) (policies.Selection, error) {
	req := requestOf(info)
	sel, err := c.catalog.Select(req)
	if err == nil && c.constraints != nil {
		err = c.constraints.Check(req, sel)
	}
	if err != nil {
		return policies.Selection{}, err
	}
	return sel, nil
}

func tenantKey(info ContainerInfo, sel policies.Selection) string {
	prefix := runtimePrefix(info.Runtime)
	if sel.Tenant == "pod" && (info.PodUID != "" || info.PodName != "") {
		id := info.PodUID
		if id == "" {
			id = info.PodNamespace + "/" + info.PodName
		}
		return prefix + "/pod/" + id
	}
	return prefix + "/ctr/" + info.ID
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
