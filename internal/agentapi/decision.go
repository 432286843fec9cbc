package agentapi

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/gpuext/gpuext/bpf/ids"
)

// Decision is the one record of an admission decision: what the agent
// answers (inside Answer) and what the runc wrapper writes into
// config.json for the OCI hook (AnnotationDecision). The admission core's
// Decision turns into it and back (admission.Decision.Record,
// admission.FromRecord); nothing else spells these fields.
type Decision struct {
	Tenant    ids.TenantID `json:"tenant"`
	TenantKey string       `json:"tenantKey"`
	// Policy is the policy's catalog name.
	Policy string `json:"policy"`
	// ConfigDigest identifies the tenant config the agent reserved.
	ConfigDigest string `json:"configDigest"`
	// FailedOpen: fail-open let the container start although something
	// went wrong (the default policy, or without gpuext: Skipped).
	FailedOpen bool `json:"failedOpen,omitempty"`
	// Skipped: the container runs without gpuext: no tenant, no injection.
	Skipped bool `json:"skipped,omitempty"`
	// MAC authenticates the decision for its container: only the agent
	// holds the key (admission's decision key), so a decision annotation
	// the container's creator wrote is told apart from the agent's.
	MAC string `json:"mac,omitempty"`
}

// Answer is a decision as the API carries it: the record, and what only
// the runtime path that asked needs of it.
type Answer struct {
	Decision
	Injection Injection `json:"injection"`
	// RequestError is the keyed error of a bad request that fail-open
	// replaced with the default policy.
	RequestError string `json:"requestError,omitempty"`
	// Error is what a skipped decision was made for.
	Error string `json:"error,omitempty"`
}

// AnnotationDecision is the config.json annotation that carries a
// Decision from the runc wrapper to the OCI hook.
const AnnotationDecision = "gpuext.io/decision"

// MaxDecisionSize bounds the annotation: it is read from a config.json that
// the container's creator could have written.
const MaxDecisionSize = 1024

// Encode is the decision's annotation value.
func (d Decision) Encode() string {
	b, _ := json.Marshal(d)
	return string(b)
}

// DecodeAnnotation reads the decision annotation; ok is false when there
// is none. Bounded and strict (an unknown field is an error). The decision
// is not trusted: the agent checks its MAC, the registry and the container.
func DecodeAnnotation(annotations map[string]string) (d Decision, ok bool, err error) {
	v, ok := annotations[AnnotationDecision]
	if !ok {
		return Decision{}, false, nil
	}
	if len(v) > MaxDecisionSize {
		return Decision{}, true, fmt.Errorf("annotation %s: %d bytes, at most %d", AnnotationDecision, len(v), MaxDecisionSize)
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(v)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return Decision{}, true, fmt.Errorf("annotation %s: %w", AnnotationDecision, err)
	}
	if dec.More() {
		return Decision{}, true, fmt.Errorf("annotation %s: data after the record", AnnotationDecision)
	}
	if !d.Skipped && (d.Tenant == 0 || d.TenantKey == "" || d.ConfigDigest == "") {
		return Decision{}, true, fmt.Errorf("annotation %s: tenant, tenantKey and configDigest are required", AnnotationDecision)
	}
	return d, true, nil
}
