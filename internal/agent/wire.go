package agent

import (
	"errors"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/policies"
)

// The API's paths.
const (
	pathAdmit    = "/v1/admit"
	pathRegister = "/v1/register"
	pathRemove   = "/v1/remove"
	// pathSetPolicy changes a running tenant's policy (gpuextctl tenants
	// set-policy).
	pathSetPolicy = "/v1/set-policy"
)

// maxRequest bounds a request body: a container's info with its labels,
// annotations and env.
const maxRequest = 4 << 20

// ErrUnavailable wraps every failure to reach the agent (no socket, refused,
// timed out, an answer that is not the API's). The caller applies its fail
// mode to it.
var ErrUnavailable = errors.New("gpuext agent unavailable")

// request is a container as a runtime path sees it.
type request struct {
	Info admission.ContainerInfo `json:"info"`
	// Change is set-policy's request (Info is then empty).
	Change *admission.PolicyChange `json:"change,omitempty"`
}

// response is the outcome: a decision, or an error. Refused is set when
// the agent's core refused the container (strict mode).
type response struct {
	Decision *wireDecision `json:"decision,omitempty"`
	Error    string        `json:"error,omitempty"`
	Kind     string        `json:"kind,omitempty"`
	Refused  bool          `json:"refused,omitempty"`
	// Cgroup is the registered cgroup (register).
	CgroupID   uint64 `json:"cgroupId,omitempty"`
	CgroupPath string `json:"cgroupPath,omitempty"`
}

type wireDecision struct {
	Tenant       uint32              `json:"tenant"`
	TenantKey    string              `json:"tenantKey"`
	Policy       string              `json:"policy"`
	ConfigDigest string              `json:"configDigest"`
	FailedOpen   bool                `json:"failedOpen,omitempty"`
	Skipped      bool                `json:"skipped,omitempty"`
	RequestErr   string              `json:"requestError,omitempty"`
	Err          string              `json:"error,omitempty"`
	Injection    admission.Injection `json:"injection"`
	MAC          string              `json:"mac,omitempty"`
}

func toWire(d admission.Decision) *wireDecision {
	w := &wireDecision{Tenant: uint32(d.Tenant), TenantKey: d.TenantKey, Policy: d.Policy.Name,
		ConfigDigest: d.ConfigDigest, FailedOpen: d.FailedOpen, Skipped: d.Skipped, Injection: d.Injection, MAC: d.MAC}
	if d.RequestErr != nil {
		w.RequestErr = d.RequestErr.Error()
	}
	if d.Err != nil {
		w.Err = d.Err.Error()
	}
	return w
}

func fromWire(w *wireDecision) admission.Decision {
	d := admission.Decision{Tenant: bpf.TenantID(w.Tenant), TenantKey: w.TenantKey, Policy: policies.Policy{Name: w.Policy},
		ConfigDigest: w.ConfigDigest, FailedOpen: w.FailedOpen, Skipped: w.Skipped, Injection: w.Injection, MAC: w.MAC}
	if w.RequestErr != "" {
		d.RequestErr = errors.New(w.RequestErr)
	}
	if w.Err != "" {
		d.Err = errors.New(w.Err)
	}
	return d
}
