package admission

import (
	"fmt"
	"strconv"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/policies"
)

// Select validates the container's request against the catalog and the admin
// constraints. In fail-open mode a bad request yields the default policy and
// the keyed error in Decision.RequestErr; in strict mode it is an error that
// wraps ErrRefused.
func (c *Core) Select(info ContainerInfo) (policies.Selection, error, error) {
	req := info.request()
	sel, err := c.catalog.Select(req)
	if err == nil && c.constraints != nil {
		err = c.constraints.Check(req, sel)
	}
	if err == nil {
		return sel, nil, nil
	}
	if c.cfg.FailMode == FailClosed {
		return policies.Selection{}, nil, fmt.Errorf("%w: container %q: %w", ErrRefused, info.Name, err)
	}
	def := policies.Selection{Policy: c.catalog.Default(), Tenant: "container"}
	return def, err, nil
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
