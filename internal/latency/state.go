package latency

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/board"
	"github.com/gpuext/gpuext/lib/atomicfile"
)

// StateFileName is the controller's learned state in the state dir: each
// latency-critical tenant's solo distribution (the base of a relative
// target, which can only be learned while no best-effort process runs, and
// on a busy node seldom again) and the budget. An agent that restarts, or
// is killed, takes them up again instead of starting over.
const StateFileName = "latency-state.json"

// StatePath is the state file of the controller of stateDir.
func StatePath(stateDir string) string { return filepath.Join(stateDir, StateFileName) }

// maxStateFile bounds what loadState reads.
const maxStateFile = 16 << 20

// savedState is the state file's content.
type savedState struct {
	Budget  float64                `json:"budget"`
	Moved   bool                   `json:"moved"`
	Tenants map[string]savedTenant `json:"tenants"`
	// the bound on cuts after one bought nothing, and until when
	NoGainBelow float64   `json:"noGainBelow,omitempty"`
	NoGainUntil time.Time `json:"noGainUntil,omitzero"`
}

// savedTenant is a tenant's learned solo distribution, valid only for the
// tenant of that generation (board.HostTenant.Gen) under its id.
type savedTenant struct {
	Gen  uint64          `json:"gen"`
	Solo board.Histogram `json:"solo"`
}

// SetStateFile makes the controller take up the state saved at path (if
// any) and save its own there when it changes (atomically).
func (c *Controller) SetStateFile(path string) {
	c.stateFile = path
	st, err := loadState(path)
	if err != nil {
		c.log.WithError(err).Warn("learned state not read: solo bases are learned anew")
		return
	}
	if st == nil {
		return
	}
	c.saved = st.Tenants
	if st.Budget > 0 {
		c.budget = min(max(st.Budget, c.cfg.MinBudget), c.cfg.MaxBudget)
		c.moved = st.Moved
	}
	if st.NoGainBelow > 0 && st.NoGainUntil.After(time.Now()) {
		c.noGain, c.noGainUntil = min(st.NoGainBelow, c.cfg.MaxBudget), st.NoGainUntil
	}
	c.log.WithField("tenants", len(st.Tenants)).WithField("budget", fmt.Sprintf("%.0f", c.budget)).Info("learned state taken up")
}

// restore gives a tenant first seen now its saved solo distribution, when
// it is the same tenant (generation) that saved it.
func (c *Controller) restore(id bpf.TenantID, gen uint64, t *tenant) {
	s, ok := c.saved[strconv.FormatUint(uint64(id), 10)]
	if ok && gen != 0 && s.Gen == gen {
		t.solo = s.Solo
	}
}

// saveState writes the learned state when it changed since the last write.
func (c *Controller) saveState(hosts map[bpf.TenantID]board.HostTenant) {
	if c.stateFile == "" {
		return
	}
	st := savedState{Budget: c.budget, Moved: c.moved, Tenants: map[string]savedTenant{}}
	if c.noGain > 0 {
		st.NoGainBelow, st.NoGainUntil = c.noGain, c.noGainUntil
	}
	for id, t := range c.tenants {
		if h := hosts[id]; t.solo.Count() > 0 && h.Gen != 0 {
			st.Tenants[strconv.FormatUint(uint64(id), 10)] = savedTenant{Gen: h.Gen, Solo: t.solo}
		}
	}
	b, err := json.Marshal(st)
	if err != nil || string(b) == c.lastSaved {
		return
	}
	if err := atomicfile.Write(c.stateFile, b, 0o600); err != nil {
		if err.Error() != c.fileErr {
			c.log.WithError(err).Warn("learned state not saved")
		}
		return
	}
	c.lastSaved = string(b)
}

// loadState reads a state file (root's; no link followed, bounded). A
// missing file is no state and no error.
func loadState(path string) (*savedState, error) {
	b, err := readOwnFile(path, maxStateFile)
	if b == nil || err != nil {
		return nil, err
	}
	var st savedState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &st, nil
}
