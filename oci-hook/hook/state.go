package hook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Stage is the OCI hook stage the hook binary was installed for.
type Stage string

const (
	StagePrestart        Stage = "prestart"
	StageCreateRuntime   Stage = "createRuntime"
	StageCreateContainer Stage = "createContainer"
	StagePoststop        Stage = "poststop"
)

// ParseStage accepts the stages the hook handles.
func ParseStage(s string) (Stage, error) {
	switch st := Stage(s); st {
	case StagePrestart, StageCreateRuntime, StageCreateContainer, StagePoststop:
		return st, nil
	}
	return "", fmt.Errorf("%w: %q (want prestart, createRuntime, createContainer or poststop)", ErrBadStage, s)
}

// registers reports whether the stage sees the host pid and an existing cgroup.
func (s Stage) registers() bool { return s == StagePrestart || s == StageCreateRuntime }

// Limits of the state read from stdin.
const (
	DefaultStateTimeout = 5 * time.Second
	MaxStateSize        = 1 << 20
	// MaxConfigSize bounds config.json and dockerd's config.v2.json.
	MaxConfigSize = 16 << 20
)

// Sentinel errors callers test with errors.Is.
var (
	ErrBadStage     = errors.New("unknown hook stage")
	ErrBadState     = errors.New("bad OCI state on stdin")
	ErrStateTimeout = errors.New("timed out reading the OCI state on stdin")
)

// ReadState decodes one OCI State JSON object from r. It returns as soon as
// the object is complete (a writer that keeps stdin open does not block it),
// fails after timeout when no complete object arrived, and reads at most
// limit bytes.
func ReadState(r io.Reader, timeout time.Duration, limit int64) (*specs.State, error) {
	type result struct {
		st  *specs.State
		err error
	}
	done := make(chan result, 1)
	go func() {
		var st specs.State
		dec := json.NewDecoder(io.LimitReader(r, limit))
		err := dec.Decode(&st)
		switch {
		case errors.Is(err, io.EOF):
			err = fmt.Errorf("%w: stdin is empty", ErrBadState)
		case errors.Is(err, io.ErrUnexpectedEOF):
			err = fmt.Errorf("%w: truncated JSON (at most %d bytes are read)", ErrBadState, limit)
		case err != nil:
			err = fmt.Errorf("%w: %w", ErrBadState, err)
		}
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{st: &st}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case res := <-done:
		return res.st, res.err
	case <-timer.C:
		// The reading goroutine stays blocked; the process exits soon after.
		return nil, fmt.Errorf("%w after %s", ErrStateTimeout, timeout)
	}
}

// ValidateState checks that the state carries what the stage needs: the
// container id and bundle always, the host pid where the hook registers.
func ValidateState(st *specs.State, stage Stage) error {
	var missing []string
	if st.ID == "" {
		missing = append(missing, "id")
	}
	if st.Bundle == "" {
		missing = append(missing, "bundle")
	}
	if stage.registers() && st.Pid <= 0 {
		missing = append(missing, "pid")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: missing %s for stage %s", ErrBadState, joinWords(missing), stage)
	}
	return nil
}

func joinWords(w []string) string {
	switch len(w) {
	case 1:
		return w[0]
	case 2:
		return w[0] + " and " + w[1]
	}
	s := ""
	for i, x := range w {
		if i == len(w)-1 {
			s += "and " + x
		} else {
			s += x + ", "
		}
	}
	return s
}
