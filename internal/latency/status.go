package latency

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/board"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
)

// maxStatusFile bounds what ReadStatus reads (a status of a few thousand
// tenants).
const maxStatusFile = 4 << 20

// StaleAfter: a status file older than this is from a controller that no
// longer runs; ReadStatus says so instead of showing it as current.
const StaleAfter = 10 * time.Second

// ErrStale is returned (with the status) for a status file older than
// StaleAfter.
var ErrStale = fmt.Errorf("latency controller status older than %s: the controller does not run", StaleAfter)

// ReadStatus reads a controller's status file (root's state dir; opened
// without following a link, bounded). A missing file is no status and no
// error.
func ReadStatus(path string, now time.Time) (*Status, error) {
	b, err := readOwnFile(path, maxStatusFile)
	if b == nil || err != nil {
		return nil, err
	}
	var s Status
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("latency status %s: %w", path, err)
	}
	if now.Sub(s.At) > StaleAfter {
		return &s, ErrStale
	}
	return &s, nil
}

// readOwnFile reads one of the controller's own files (root's state dir):
// no link followed, a regular file of at most max bytes. A missing file is
// nil and no error.
func readOwnFile(path string, max int) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err == unix.ENOENT {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > max {
		return nil, fmt.Errorf("%s: over %d bytes", path, max)
	}
	return b, nil
}

// Tenant is the status of tenant id (nil when s is nil or has none).
func (s *Status) Tenant(id bpf.TenantID) *TenantStatus {
	if s == nil {
		return nil
	}
	for i := range s.Tenants {
		if s.Tenants[i].ID == id {
			return &s.Tenants[i]
		}
	}
	return nil
}

// Cell is the tenant table's LATENCY column: a latency-critical tenant's
// p99 against its target and the verdict (or why it is not judged), a
// best-effort tenant's "stalled 40s", any tenant's failed exits, "-"
// otherwise.
func (t *TenantStatus) Cell() string {
	c := t.cell()
	if t != nil && t.FailedExits > 0 {
		failed := fmt.Sprintf("%d failed exit", t.FailedExits)
		if t.FailedExits > 1 {
			failed += "s"
		}
		if c == "-" {
			return failed
		}
		return c + "; " + failed
	}
	return c
}

func (t *TenantStatus) cell() string {
	switch {
	case t == nil:
		return "-"
	case t.Class == tenantcfg.ClassBestEffort && t.Stalled:
		return "stalled " + t.StalledFor.Round(time.Second).String()
	case t.Target == "" && t.P99 > 0:
		return "p99 " + short(t.P99)
	case t.Target == "":
		return "-"
	}
	switch t.Verdict {
	case Met, Missed:
		v := "met"
		if t.Verdict == Missed {
			v = "MISSED"
			if t.NoShareGain {
				v += " (paced; a smaller best-effort share bought nothing)"
			}
		}
		if t.WorstQuantile > 0 && t.WorstQuantile < 0.99 { // a relative target, set by another percentile
			return fmt.Sprintf("p99 %s, p%.0f at %.2f of %s: %s", short(t.P99), t.WorstQuantile*100, t.Ratio, t.Target, v)
		}
		return fmt.Sprintf("p99 %s (target %s, %.2f of it): %s", short(t.P99), short(t.TargetP99), t.Ratio, v)
	case NoBaseline:
		if t.MeasuringAlone {
			return "target " + t.Target + ": measuring alone (best-effort launches held)"
		}
		return "target " + t.Target + ": not yet seen alone"
	default:
		return "target " + t.Target + ": too few requests"
	}
}

func short(d time.Duration) string {
	switch {
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// Summary is the node's line under the tenant table: what the controller
// publishes to best-effort contexts (the budget, the share of a context
// made now, pacing and its GPUs, a hold, a bound on cuts), or why there is
// nothing to show. "" when no controller ever ran or no target is on the
// node. err is ReadStatus's.
func Summary(s *Status, err error, now time.Time) string {
	switch {
	case s != nil && errors.Is(err, ErrStale):
		return fmt.Sprintf("latency control: status from %s ago: the controller does not run (is the agent up?); latency not shown",
			now.Sub(s.At).Round(time.Second))
	case err != nil:
		return "latency control: status not read: " + err.Error()
	case s == nil || s.Targets == 0:
		return ""
	}
	line := fmt.Sprintf("latency control: %d target", s.Targets)
	if s.Targets > 1 {
		line += "s"
	}
	line += fmt.Sprintf("; best-effort budget %.0f%% of the SMs", s.Budget)
	if s.SMPercent > 0 {
		line += fmt.Sprintf(", %d%% for a context made now", s.SMPercent)
	}
	switch s.Pace {
	case board.PaceRequest:
		line += "; best-effort launches paced during requests on " + gpuList(s.PaceGPUs)
		if s.PaceDepth > 0 {
			line += fmt.Sprintf(" (at most %d unfinished)", s.PaceDepth)
		}
	case board.PaceHold:
		line += fmt.Sprintf("; best-effort launches held on %s to measure tenant %d alone", gpuList(s.PaceGPUs), s.HoldTenant)
	}
	if s.NoGainBelow > 0 {
		line += fmt.Sprintf("; no cut below %.0f%%: a smaller share bought no latency", s.NoGainBelow)
	}
	return line
}

// gpuList names the GPUs of a bit set (bit i: host GPU i); 0 is every GPU.
func gpuList(set uint64) string {
	if set == 0 {
		return "every GPU"
	}
	var ids []string
	for i := 0; i < 64; i++ {
		if set&(1<<i) != 0 {
			ids = append(ids, strconv.Itoa(i))
		}
	}
	if len(ids) == 1 {
		return "GPU " + ids[0]
	}
	return "GPUs " + strings.Join(ids, ",")
}
