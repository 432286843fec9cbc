package admission

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/internal/agentapi"
	"github.com/gpuext/gpuext/internal/failmode"
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
// Decision from the runc wrapper to the OCI hook (agentapi's record).
const AnnotationDecision = agentapi.AnnotationDecision

// Record is the decision's one record (agentapi.Decision): what the agent
// answers and the wrapper writes into the annotation.
func (d Decision) Record() agentapi.Decision {
	return agentapi.Decision{Tenant: d.Tenant, TenantKey: d.TenantKey, Policy: d.Policy.Name,
		ConfigDigest: d.ConfigDigest, FailedOpen: d.FailedOpen, Skipped: d.Skipped, MAC: d.MAC}
}

// Answer is the decision as the agent's API carries it.
func (d Decision) Answer() agentapi.Answer {
	a := agentapi.Answer{Decision: d.Record(), Injection: d.Injection}
	if d.RequestErr != nil {
		a.RequestError = d.RequestErr.Error()
	}
	if d.Err != nil {
		a.Error = d.Err.Error()
	}
	return a
}

// FromRecord is the decision a record names (the policy by name only).
func FromRecord(r agentapi.Decision) Decision {
	return Decision{Tenant: r.Tenant, TenantKey: r.TenantKey, Policy: policies.Policy{Name: r.Policy},
		ConfigDigest: r.ConfigDigest, FailedOpen: r.FailedOpen, Skipped: r.Skipped, MAC: r.MAC}
}

// Encode is the decision's annotation value.
func (d Decision) Encode() string { return d.Record().Encode() }

// DecodeDecision reads the decision annotation (agentapi.DecodeAnnotation);
// ok is false when there is none. The decision is not trusted: Register
// checks it against the registry and the container.
func DecodeDecision(annotations map[string]string) (d Decision, ok bool, err error) {
	r, ok, err := agentapi.DecodeAnnotation(annotations)
	if err != nil || !ok {
		return Decision{}, ok, err
	}
	return FromRecord(r), true, nil
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

// ErrorKind says what went wrong in admission or registration
// (failmode.Kind); the fail mode treats every kind the same way on every
// runtime path (failmode.Decide).
type ErrorKind = failmode.Kind

const (
	// KindRequest: the container's keys are malformed or name nothing.
	KindRequest = failmode.KindRequest
	// KindConstraint: the admin constraints forbid the request.
	KindConstraint = failmode.KindConstraint
	// KindNotFound: a request about a running tenant (set-policy) names
	// none; admission of a container never has this kind.
	KindNotFound ErrorKind = agentapi.KindNotFound
	// KindInternal: gpuext itself failed (registry full, a state directory
	// write, a cgroup that cannot be resolved, the agent unreachable).
	KindInternal = failmode.KindInternal
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
// or registration (failmode.Outcome).
type Outcome = failmode.Outcome

const (
	// OutcomeAdmitted: the container runs under its policy.
	OutcomeAdmitted = failmode.Admitted
	// OutcomeDefault: fail-open replaced a bad request with the default policy.
	OutcomeDefault = failmode.Default
	// OutcomeWithout: fail-open let the container run without gpuext.
	OutcomeWithout = failmode.Without
	// OutcomeRefused: strict mode refused the container.
	OutcomeRefused = failmode.Refused
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

// RegisterStored is Register for a caller that lost the decision Admit
// made (the NRI plugin after a restart, or a container it skipped): the
// decision stored in the registry (StoredDecision), the fail mode applied
// to an error finding it. A container with none runs without gpuext.
func (c *Core) RegisterStored(info ContainerInfo) (Decision, cgroup.Cgroup, error) {
	log := c.log.WithFields(logrus.Fields{"container": info.ID, "name": info.Name, "pod": info.PodName,
		"namespace": info.PodNamespace})
	d, ok, err := c.StoredDecision(info)
	if err != nil {
		fd, ferr := c.failed(info, log, "register", err)
		return fd, cgroup.Cgroup{}, ferr
	}
	if !ok {
		log.Debug("no gpuext decision for this container: it runs without gpuext")
		return Decision{Skipped: true}, cgroup.Cgroup{}, nil
	}
	return c.Register(info, d)
}

// StoredDecision recovers the decision Admit made for a container from the
// registry, for a caller that lost it (the NRI plugin after a restart): the
// tenant reserved under the container's key, or under its pod's key. ok is
// false when none is reserved.
func (c *Core) StoredDecision(info ContainerInfo) (Decision, bool, error) {
	keys := []string{containerTenantKey(info)}
	if key, ok := podTenantKey(info); ok {
		keys = append(keys, key)
	}
	for _, key := range keys {
		id, ok, err := c.reg.LookupKey(key)
		if err != nil {
			return Decision{}, false, err
		}
		if !ok {
			continue
		}
		t, err := c.reg.TenantRecord(id)
		if errors.Is(err, bpf.ErrNoTenant) {
			continue
		}
		if err != nil {
			return Decision{}, false, err
		}
		return Decision{Tenant: id, TenantKey: key, Policy: policies.Policy{Name: t.Policy},
			ConfigDigest: configDigest(t.Policy, t.Config),
			FailedOpen:   t.Config.Flags&uint32(bpf.TenantFlagFailOpen) != 0}, true, nil
	}
	return Decision{}, false, nil
}
