package latency

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/devrt/board"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
)

// The status file round-trips; a stale one says so; a link or an
// oversized file is refused; a missing one is no status and no error.
func TestReadStatus(t *testing.T) {
	dir := t.TempDir()
	path := StatusPath(dir)
	now := time.Unix(5000, 0)
	st := Status{At: now, Budget: 42, SMPercent: 21, Pace: 1, Targets: 1,
		Tenants: []TenantStatus{{ID: 1, Class: tenantcfg.ClassLatencyCritical, Target: "1.5x", P99: 400 * time.Microsecond,
			TargetP99: 300 * time.Microsecond, Verdict: Missed, Ratio: 1.33, WorstQuantile: 0.5}}}
	if s, err := ReadStatus(path, now); s != nil || err != nil {
		t.Fatalf("missing file: %v, %v", s, err)
	}
	b, _ := json.Marshal(st)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadStatus(path, now.Add(time.Second))
	if err != nil || got.Tenant(1) == nil || got.Tenant(1).Ratio != 1.33 || got.SMPercent != 21 {
		t.Fatalf("ReadStatus = %+v, %v", got, err)
	}
	if got.Tenant(9) != nil {
		t.Error("a tenant not in the status has one")
	}
	if _, err := ReadStatus(path, now.Add(time.Minute)); !errors.Is(err, ErrStale) {
		t.Errorf("a minute old: %v, want ErrStale", err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadStatus(link, now); err == nil {
		t.Error("a link was followed")
	}
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, []byte(strings.Repeat(" ", maxStatusFile+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadStatus(big, now); err == nil || !strings.Contains(err.Error(), "over") {
		t.Errorf("an oversized file: %v", err)
	}
}

// The tenant table's LATENCY cell says what an operator needs: the p99,
// the target and whether it holds, or why it is not judged.
func TestCell(t *testing.T) {
	var none *TenantStatus
	for _, tc := range []struct {
		ts   *TenantStatus
		want string
	}{
		{none, "-"},
		{&TenantStatus{Class: tenantcfg.ClassBestEffort}, "-"},
		{&TenantStatus{Class: tenantcfg.ClassBestEffort, Stalled: true, StalledFor: 41 * time.Second}, "stalled 41s"},
		{&TenantStatus{Class: tenantcfg.ClassLatencyCritical, P99: 380 * time.Microsecond}, "p99 380µs"},
		{&TenantStatus{Class: tenantcfg.ClassLatencyCritical, Target: "1.5x", Verdict: NoBaseline}, "target 1.5x: not yet seen alone"},
		{&TenantStatus{Class: tenantcfg.ClassLatencyCritical, Target: "1.5x", Verdict: TooFew}, "target 1.5x: too few requests"},
		{&TenantStatus{Class: tenantcfg.ClassLatencyCritical, Target: "1.5x", Verdict: Missed, P99: 380 * time.Microsecond, Ratio: 1.05, WorstQuantile: 0.25},
			"p99 380µs, p25 at 1.05 of 1.5x: MISSED"},
		{&TenantStatus{Class: tenantcfg.ClassLatencyCritical, Target: "1.5x", Verdict: Missed, P99: 380 * time.Microsecond, Ratio: 1.05, WorstQuantile: 0.25, NoShareGain: true},
			"p99 380µs, p25 at 1.05 of 1.5x: MISSED (paced; a smaller best-effort share bought nothing)"},
		{&TenantStatus{Class: tenantcfg.ClassLatencyCritical, Target: "450µs", Verdict: Met, P99: 310 * time.Microsecond, TargetP99: 450 * time.Microsecond, Ratio: 0.69, WorstQuantile: 0.99},
			"p99 310µs (target 450µs, 0.69 of it): met"},
	} {
		if got := tc.ts.Cell(); got != tc.want {
			t.Errorf("Cell(%+v) = %q, want %q", tc.ts, got, tc.want)
		}
	}
}

// The line under the tenant table says what the controller does for the
// node, and that a stale status is not current.
func TestSummary(t *testing.T) {
	now := time.Unix(5000, 0)
	for _, tc := range []struct {
		s    *Status
		err  error
		want string
	}{
		{nil, nil, ""},
		{&Status{At: now, Budget: 60}, nil, ""},
		{&Status{At: now, Targets: 1, Budget: 60, SMPercent: 30}, nil, "latency control: 1 target; best-effort budget 60% of the SMs, 30% for a context made now"},
		{&Status{At: now, Targets: 2, Budget: 42, SMPercent: 21, Pace: board.PaceRequest, PaceGPUs: 0b101, NoGainBelow: 42}, nil,
			"latency control: 2 targets; best-effort budget 42% of the SMs, 21% for a context made now; best-effort launches paced during requests on GPUs 0,2; no cut below 42%: a smaller share bought no latency"},
		{&Status{At: now, Targets: 1, Budget: 60, SMPercent: 60, Pace: board.PaceHold, HoldTenant: 7}, nil,
			"latency control: 1 target; best-effort budget 60% of the SMs, 60% for a context made now; best-effort launches held on every GPU to measure tenant 7 alone"},
		{&Status{At: now.Add(-90 * time.Second), Targets: 1}, ErrStale,
			"latency control: status from 1m30s ago: the controller does not run (is the agent up?); latency not shown"},
		{nil, errors.New("x: not a regular file"), "latency control: status not read: x: not a regular file"},
	} {
		if got := Summary(tc.s, tc.err, now); got != tc.want {
			t.Errorf("Summary(%+v, %v) =\n %q\nwant\n %q", tc.s, tc.err, got, tc.want)
		}
	}
}
