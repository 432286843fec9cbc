package failmode

import (
	"errors"
	"fmt"

	"github.com/sirupsen/logrus"
)

// Mode says what happens to a container that gpuext cannot admit as asked.
type Mode string

const (
	// Open (the default) starts the container: with the default policy
	// for a bad request, without gpuext for an internal error. Logged.
	Open Mode = "fail-open"
	// Strict refuses to create the container; the error names the key.
	Strict Mode = "strict"
)

// Parse accepts "fail-open" (the default when empty) or "strict"
// ("fail-closed" is read as strict).
func Parse(s string) (Mode, error) {
	switch s {
	case "", string(Open):
		return Open, nil
	case string(Strict), "fail-closed":
		return Strict, nil
	}
	return "", fmt.Errorf("failMode %q: want %q or %q", s, Open, Strict)
}

// ErrRefused wraps the error of every container refused under Strict: a
// caller that sees it knows the fail mode was applied already.
var ErrRefused = errors.New("gpu policy request refused")

// Kind says what went wrong in admission or registration.
type Kind string

const (
	// KindRequest: the container's keys are malformed or name nothing.
	KindRequest Kind = "request"
	// KindConstraint: the admin constraints forbid the request.
	KindConstraint Kind = "constraint"
	// KindInternal: gpuext itself failed (registry full, a state directory
	// write, a cgroup that cannot be resolved, the agent unreachable).
	KindInternal Kind = "internal"
)

// Outcome is what a runtime path does with a container.
type Outcome string

const (
	// Admitted: the container runs under its policy.
	Admitted Outcome = "admitted"
	// Default: the bad part of the request is dropped: a bad policy
	// request gets the default policy (a forged decision annotation is
	// ignored and the container admitted as if it had none).
	Default Outcome = "default-policy"
	// Without: the container runs without gpuext.
	Without Outcome = "without-gpuext"
	// Refused: the container is not created.
	Refused Outcome = "refused"
)

// Decide is the one rule, for every runtime path and error kind: strict
// refuses; fail-open drops a bad request's bad part (KindRequest,
// KindConstraint) and runs the container without gpuext when gpuext
// itself failed (KindInternal).
func Decide(mode Mode, kind Kind) Outcome {
	switch {
	case mode == Strict:
		return Refused
	case kind == KindInternal:
		return Without
	}
	return Default
}

// Apply decides what err of kind, at step, does to the container name,
// and logs it: an error that wraps ErrRefused was decided already (by the
// agent) and is returned as it is. Otherwise Refused comes with an error
// wrapping ErrRefused and err; Default and Without with none.
func Apply(mode Mode, kind Kind, log *logrus.Entry, step, name string, err error) (Outcome, error) {
	if errors.Is(err, ErrRefused) {
		return Refused, err
	}
	out := Decide(mode, kind)
	log = log.WithFields(logrus.Fields{"failMode": mode, "errorKind": kind, "step": step, "outcome": out}).WithError(err)
	switch out {
	case Refused:
		log.Error("refused container (strict)")
		return out, fmt.Errorf("%w: container %q: %w", ErrRefused, name, err)
	case Without:
		log.Warn("gpuext failed for this container: it runs without gpuext (fail-open)")
	default:
		log.Warn("bad gpu policy request: the container starts without what it asked for (fail-open)")
	}
	return out, nil
}
