package admission

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/policies"
)

// Decision is the one outcome of admitting a container. Admit makes it;
// every later step (NRI StartContainer, the OCI hook at createRuntime)
// applies it and never selects again. On the OCI path it travels from the
// runc wrapper to the hook in config.json (AnnotationDecision); in the NRI
// plugin it stays in memory and, after a restart, is recovered from the
// registry, where Admit reserved it.
type Decision struct {
	Tenant    bpf.TenantID
	TenantKey string
	Policy    policies.Policy
	// ConfigDigest identifies the tenant config Admit reserved (policy name
	// and the kernel-facing config, tenant id excluded): registration checks
	// that the registry still holds it.
	ConfigDigest string
	// FailedOpen: fail-open mode let the container start although something
	// went wrong: with the default policy (RequestErr set), or without gpuext
	// at all (Skipped).
	FailedOpen bool
	// Skipped: the container runs without gpuext (fail-open after an
	// internal error): no tenant, no injection, nothing to register.
	Skipped bool
	// RequestErr is the keyed error of a bad request that fail-open mode
	// replaced with the default policy; nil for a good request.
	RequestErr error
	// Err is the error a skipped decision was made for.
	Err       error
	Injection Injection
	// MAC authenticates the decision for its container (Core.Admit sets
	// it): only a core holding the state dir's decision key can make one,
	// so a decision annotation that a container's creator wrote is told
	// apart from the agent's (Core.RegisterOCI).
	MAC string
}

// AnnotationDecision is the config.json annotation that carries a
// Decision from the runc wrapper to the OCI hook.
const AnnotationDecision = "gpuext.io/decision"

// decisionRecord is the annotation's JSON form.
type decisionRecord struct {
	Tenant     uint32 `json:"tenant"`
	TenantKey  string `json:"tenantKey"`
	Policy     string `json:"policy"`
	Digest     string `json:"configDigest"`
	FailedOpen bool   `json:"failedOpen,omitempty"`
	Skipped    bool   `json:"skipped,omitempty"`
	MAC        string `json:"mac,omitempty"`
}

// maxDecisionSize bounds the annotation: it is read from a config.json that
// the container's creator could have written.
const maxDecisionSize = 1024

// Encode is the decision's annotation value.
func (d Decision) Encode() string {
	b, _ := json.Marshal(decisionRecord{Tenant: uint32(d.Tenant), TenantKey: d.TenantKey, Policy: d.Policy.Name,
		Digest: d.ConfigDigest, FailedOpen: d.FailedOpen, Skipped: d.Skipped, MAC: d.MAC})
	return string(b)
}

// DecodeDecision reads the decision annotation; ok is false when there is
// none. The decision is not trusted: Register checks it against the
// registry and the container.
func DecodeDecision(annotations map[string]string) (d Decision, ok bool, err error) {
	v, ok := annotations[AnnotationDecision]
	if !ok {
		return Decision{}, false, nil
	}
	if len(v) > maxDecisionSize {
		return Decision{}, true, fmt.Errorf("annotation %s: %d bytes, at most %d", AnnotationDecision, len(v), maxDecisionSize)
	}
	var r decisionRecord
	dec := json.NewDecoder(bytes.NewReader([]byte(v)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Decision{}, true, fmt.Errorf("annotation %s: %w", AnnotationDecision, err)
	}
	if !r.Skipped && (r.Tenant == 0 || r.TenantKey == "" || r.Digest == "") {
		return Decision{}, true, fmt.Errorf("annotation %s: tenant, tenantKey and configDigest are required", AnnotationDecision)
	}
	return Decision{Tenant: bpf.TenantID(r.Tenant), TenantKey: r.TenantKey, Policy: policies.Policy{Name: r.Policy},
		ConfigDigest: r.Digest, FailedOpen: r.FailedOpen, Skipped: r.Skipped, MAC: r.MAC}, true, nil
}

// configDigest identifies a reserved tenant config: the policy name and the
// kernel-facing config with the registry-assigned tenant id left out.
func configDigest(policy string, cfg bpf.GpuextTenantConfig) string {
	cfg.TenantId = 0
	h := sha256.New()
	h.Write([]byte(policy))
	h.Write([]byte{0})
	_ = binary.Write(h, binary.LittleEndian, &cfg)
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// ErrorKind says what went wrong in admission or registration; the fail
// mode treats every kind the same way on every runtime path.
type ErrorKind string

const (
	// KindRequest: the container's keys are malformed or name nothing.
	KindRequest ErrorKind = "request"
	// KindConstraint: the admin constraints forbid the request.
	KindConstraint ErrorKind = "constraint"
	// KindNotFound: a request about a running tenant (set-policy) names
	// none; admission of a container never has this kind.
	KindNotFound ErrorKind = "not-found"
	// KindInternal: gpuext itself failed (registry full, a state directory
	// write, a cgroup that cannot be resolved, the agent unreachable).
	KindInternal ErrorKind = "internal"
)

// ErrDecisionForged: a decision annotation that the agent did not make for
// this container (no MAC, or one that does not verify): written by whoever
// created the container, or copied from another one. It is a bad request
// (KindRequest): strict refuses the container, fail-open admits it as if
// the annotation were not there.
var ErrDecisionForged = errors.New("decision not made by the gpuext agent for this container")

// ErrDecisionMismatch: a stored decision no longer matches the registry
// (or names another container's tenant).
var ErrDecisionMismatch = errors.New("decision does not match the registry")

// KindOf classifies an admission error.
func KindOf(err error) ErrorKind {
	switch {
	case errors.Is(err, policies.ErrForbidden):
		return KindConstraint
	case errors.Is(err, ErrUnknownTenant):
		return KindNotFound
	case errors.Is(err, errRequest), errors.Is(err, ErrDecisionForged), errors.Is(err, policies.ErrUnknownPolicy), errors.Is(err, policies.ErrBadSize),
		errors.Is(err, policies.ErrBadValue), errors.Is(err, policies.ErrUnknownKey), errors.Is(err, policies.ErrMissingParam):
		return KindRequest
	}
	return KindInternal
}

// errRequest marks a bad request that is not one of policies' sentinels
// (a pod tenant asked for per-container settings).
var errRequest = errors.New("bad gpu policy request")

// Outcome is what a runtime path does with a container after admission
// or registration: the fail mode applied in one place.
type Outcome string

const (
	// OutcomeAdmitted: the container runs under its policy.
	OutcomeAdmitted Outcome = "admitted"
	// OutcomeDefault: fail-open replaced a bad request with the default policy.
	OutcomeDefault Outcome = "default-policy"
	// OutcomeWithout: fail-open let the container run without gpuext.
	OutcomeWithout Outcome = "without-gpuext"
	// OutcomeRefused: strict mode refused the container.
	OutcomeRefused Outcome = "refused"
)

// OutcomeOf is the outcome of a decision and the error returned with it.
func OutcomeOf(d Decision, err error) Outcome {
	switch {
	case err != nil:
		return OutcomeRefused
	case d.Skipped:
		return OutcomeWithout
	case d.RequestErr != nil:
		return OutcomeDefault
	}
	return OutcomeAdmitted
}
