package kernelpolicy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/gpuext/gpuext/bpf"
)

// Loader attaches catalog policies with links pinned under
// <PinDir>/links/<name>, so they stay attached when the process that
// attached them exits or restarts; only Detach removes them.
type Loader struct {
	// PinDir is the bpffs directory of the registry (bpf.DefaultPinDir when empty).
	PinDir string
	// Core is the core module's debugfs view (DefaultDebugfsDir when Core.Dir is empty).
	Core Core
}

// NewLoader returns a loader pinning under pinDir (bpf.DefaultPinDir when
// empty) and reading the core at DefaultDebugfsDir.
func NewLoader(pinDir string) *Loader {
	return &Loader{PinDir: pinDir, Core: DefaultCore()}
}

// LinksDir is where the loader pins links.
func (l *Loader) LinksDir() string {
	dir := l.PinDir
	if dir == "" {
		dir = bpf.DefaultPinDir
	}
	return filepath.Join(dir, "links")
}

func (l *Loader) linkPath(name string) string { return filepath.Join(l.LinksDir(), name) }

// Attach loads the named catalog policy, attaches it and pins its link.
// The returned handle may be closed (or the process may exit): the policy
// stays attached.  Attaching a name already pinned is an error.
func (l *Loader) Attach(name string) (*Attached, error) {
	e, ok := catalog[name]
	if !ok {
		return nil, fmt.Errorf("attach %q: %w", name, ErrUnknownPolicy)
	}
	if err := l.Core.Check(); err != nil {
		return nil, fmt.Errorf("attach %q: %w", name, err)
	}
	path := l.linkPath(name)
	if _, err := os.Stat(path); err == nil {
		return nil, fmt.Errorf("attach %q: already attached (pinned at %s; detach it first)", name, path)
	}
	if err := os.MkdirAll(l.LinksDir(), 0o700); err != nil {
		return nil, fmt.Errorf("attach %q: pin dir: %w", name, err)
	}
	spec, err := e.load()
	if err != nil {
		return nil, fmt.Errorf("load %q spec: %w", name, err)
	}
	a, err := attachSpec(name, spec, e.opsMap)
	if err != nil {
		return nil, err
	}
	if err := a.link.Pin(path); err != nil {
		a.Close()
		return nil, fmt.Errorf("attach %q: pin link at %s: %w", name, path, err)
	}
	a.pinned = true
	return a, nil
}

// Open returns a handle on a policy attached (and pinned) earlier, by this
// or another process.  Closing it leaves the policy attached.  The handle
// has no maps (Map and SetContextLimit need the handle Attach returned).
func (l *Loader) Open(name string) (*Attached, error) {
	path := l.linkPath(name)
	lk, err := link.LoadPinnedLink(path, nil)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open %q: not attached (no pin at %s)", name, path)
	}
	if err != nil {
		return nil, fmt.Errorf("open %q: %w", name, err)
	}
	return &Attached{Name: name, link: lk, pinned: true}, nil
}

// Detach unpins and closes the named policy's link: the policy detaches and
// its tenants return to the driver's stock behaviour.  It waits (up to 2 s)
// until the core no longer lists the ops.
func (l *Loader) Detach(name string) error {
	a, err := l.Open(name)
	if err != nil {
		return fmt.Errorf("detach: %w", err)
	}
	// BPF_LINK_DETACH unregisters at once; the pin and fd references then
	// only keep an inert link.
	derr := a.link.Detach()
	if err := a.link.Unpin(); err != nil {
		a.link.Close()
		return fmt.Errorf("detach %q: unpin: %w", name, err)
	}
	if err := a.link.Close(); err != nil {
		return fmt.Errorf("detach %q: %w", name, err)
	}
	if derr != nil && !errors.Is(derr, link.ErrNotSupported) {
		return fmt.Errorf("detach %q: %w", name, derr)
	}
	ops := bpf.OpsName(name) // a kernel policy directory's policy
	if e, ok := catalog[name]; ok {
		ops = e.ops
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		st, err := l.Core.Stats()
		if err != nil {
			return nil // no core to confirm with: the link is gone
		}
		if !listed(st, ops) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("detach %q: the core still lists ops %q", name, ops)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func listed(st []OpsStats, ops string) bool {
	for _, s := range st {
		if s.Ops == ops {
			return true
		}
	}
	return false
}

// Status is one attached policy: its pin, and the core's listing of its ops.
type Status struct {
	// Name is the catalog name ("" for ops the core lists that no pin here holds).
	Name string `json:"name"`
	// Pinned: a link is pinned under LinksDir.
	Pinned bool `json:"pinned"`
	// Listed: the core lists the ops (false for a pin whose ops are gone).
	Listed bool `json:"listed"`
	OpsStats
}

// Attached lists the policies pinned under LinksDir, cross-checked with the
// core's listing, followed by ops the core lists that no pin here holds
// (attached by another loader, or by a process without pins).
func (l *Loader) Attached() ([]Status, error) {
	stats, err := l.Core.Stats()
	if err != nil {
		return nil, err
	}
	byOps := map[string]OpsStats{}
	for _, s := range stats {
		byOps[s.Ops] = s
	}
	dirents, err := os.ReadDir(l.LinksDir())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list pinned links: %w", err)
	}
	var out []Status
	seen := map[string]bool{}
	for _, d := range dirents {
		name := d.Name()
		st := Status{Name: name, Pinned: true}
		ops, kind := bpf.OpsName(name), Kind("")
		if e, ok := catalog[name]; ok {
			ops, kind = e.ops, e.kind
		}
		st.Ops, st.Kind = ops, kind
		if s, ok := byOps[ops]; ok {
			st.OpsStats, st.Listed = s, true
			seen[ops] = true
		}
		out = append(out, st)
	}
	var rest []Status
	for _, s := range stats {
		if !seen[s.Ops] {
			rest = append(rest, Status{Name: catalogName(s.Ops), Listed: true, OpsStats: s})
		}
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].Ops < rest[j].Ops })
	return append(out, rest...), nil
}

// catalogName is the catalog name of a core ops name, or "".
func catalogName(ops string) string {
	for n, e := range catalog {
		if e.ops == ops {
			return n
		}
	}
	return ""
}

// Stats reads the core's per-ops counters.
func (l *Loader) Stats() ([]OpsStats, error) { return l.Core.Stats() }
