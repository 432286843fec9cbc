package memguard

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/internal/gpuview"
)

const gib = 1 << 30

// killLog records the kills a guard asks for.
type killLog struct {
	killed []uint32
	fail   error
}

func (k *killLog) Kill(pid uint32, _ cgroup.ID) error {
	if k.fail != nil {
		return k.fail
	}
	k.killed = append(k.killed, pid)
	return nil
}

// two tenants: 7 (cgroup 70, 4 GiB on every GPU, kill) and 8 (cgroup 80,
// 2 GiB on host GPU 1 only, report); pids 700+ are in cgroup 70, 800+ in
// 80, 900+ in no tenant.
func fixture() (*Guard, *killLog, []Limit) {
	k := &killLog{}
	cgOf := func(pid uint32) (cgroup.ID, error) {
		switch {
		case pid >= 900:
			return 90, nil
		case pid >= 800:
			return 80, nil
		case pid >= 700:
			return 70, nil
		}
		return 0, errors.New("no such process")
	}
	g := New(Options{ContextMargin: 512 << 20, Cooldown: 2 * time.Second}, cgOf, k)
	limits := []Limit{
		{Tenant: 7, Key: "ns/a", Policy: "quota", Cgroups: []cgroup.ID{70}, Quota: 4 * gib, Action: ActionKill},
		{Tenant: 8, Key: "ns/b", Policy: "batch", Cgroups: []cgroup.ID{80}, GPUs: map[int]uint64{1: 2 * gib}, Action: ActionReport},
	}
	return g, k, limits
}

func TestGuardKillsTheProcessThatPushedTheTenantOver(t *testing.T) {
	g, k, limits := fixture()
	t0 := time.Unix(1000, 0)
	// tenant 7: two processes at 2 GiB each on GPU 0, within 4 GiB + 2 margins
	ev := g.Check(t0, []gpuview.SampleProc{{GPU: 0, PID: 700, UsedBytes: 2 * gib}, {GPU: 0, PID: 701, UsedBytes: 2 * gib}}, limits)
	if len(ev) != 0 || len(k.killed) != 0 {
		t.Fatalf("within the quota: events %+v, kills %v", ev, k.killed)
	}
	// 701 grows to 6 GiB: 8 GiB > 4 GiB + 1 GiB of margins; 701 is stopped, not 700
	ev = g.Check(t0.Add(time.Second), []gpuview.SampleProc{{GPU: 0, PID: 700, UsedBytes: 2 * gib}, {GPU: 0, PID: 701, UsedBytes: 6 * gib}}, limits)
	if len(ev) != 1 || ev[0].Victim != 701 || ev[0].Used != 8*gib || ev[0].Allowed != 5*gib || ev[0].Procs != 2 {
		t.Fatalf("over the quota: events %+v", ev)
	}
	if !slices.Equal(k.killed, []uint32{701}) {
		t.Fatalf("killed %v, want [701] (the process that grew)", k.killed)
	}
	// the driver has not freed it yet: no second kill while it is listed and cooling
	ev = g.Check(t0.Add(1500*time.Millisecond), []gpuview.SampleProc{{GPU: 0, PID: 700, UsedBytes: 2 * gib}, {GPU: 0, PID: 701, UsedBytes: 6 * gib}}, limits)
	if len(k.killed) != 1 || len(ev) != 0 {
		t.Fatalf("cooling down: kills %v, events %+v", k.killed, ev)
	}
	// 701 gone, the tenant back within: nothing
	ev = g.Check(t0.Add(2*time.Second), []gpuview.SampleProc{{GPU: 0, PID: 700, UsedBytes: 2 * gib}}, limits)
	if len(ev) != 0 || len(k.killed) != 1 {
		t.Fatalf("after the kill: events %+v, kills %v", ev, k.killed)
	}
	if _, ok := g.pids[701]; ok {
		t.Error("pid 701 left the list but is still cached")
	}
}

func TestGuardNeverTouchesOtherTenantsOrUntrackedProcesses(t *testing.T) {
	g, k, limits := fixture()
	now := time.Unix(1000, 0)
	procs := []gpuview.SampleProc{
		{GPU: 0, PID: 700, UsedBytes: 3 * gib},  // tenant 7 within
		{GPU: 0, PID: 900, UsedBytes: 60 * gib}, // no tenant: never touched
		{GPU: 1, PID: 800, UsedBytes: 2 * gib},  // tenant 8 within its GPU 1 quota
	}
	if ev := g.Check(now, procs, limits); len(ev) != 0 || len(k.killed) != 0 {
		t.Fatalf("events %+v, kills %v", ev, k.killed)
	}
	// a pid that cannot be resolved (exited) is skipped, not an error
	if ev := g.Check(now, []gpuview.SampleProc{{GPU: 0, PID: 5, UsedBytes: 70 * gib}}, limits); len(ev) != 0 {
		t.Fatalf("unresolvable pid: events %+v", ev)
	}
}

func TestGuardReportOnlyOncePerOverrun(t *testing.T) {
	g, k, limits := fixture()
	now := time.Unix(1000, 0)
	over := []gpuview.SampleProc{{GPU: 1, PID: 800, UsedBytes: 3 * gib}} // 3 > 2 GiB + 0.5
	ev := g.Check(now, over, limits)
	if len(ev) != 1 || ev[0].Action != ActionReport || ev[0].Victim != 0 || ev[0].Tenant != 8 || ev[0].GPU != 1 {
		t.Fatalf("report: %+v", ev)
	}
	if ev = g.Check(now.Add(time.Second), over, limits); len(ev) != 0 {
		t.Fatalf("the same overrun said twice: %+v", ev)
	}
	g.Check(now.Add(2*time.Second), []gpuview.SampleProc{{GPU: 1, PID: 800, UsedBytes: gib}}, limits)
	if ev = g.Check(now.Add(3*time.Second), over, limits); len(ev) != 1 {
		t.Fatalf("a new overrun after recovering: %+v", ev)
	}
	if len(k.killed) != 0 {
		t.Fatalf("report-only tenant: killed %v", k.killed)
	}
}

func TestGuardGPUNotGivenAllowsOnlyTheMargin(t *testing.T) {
	g, _, limits := fixture()
	// tenant 8 was given GPU 1 only: 1 GiB on GPU 0 is past its margin
	ev := g.Check(time.Unix(1000, 0), []gpuview.SampleProc{{GPU: 0, PID: 800, UsedBytes: gib}}, limits)
	if len(ev) != 1 || ev[0].GPU != 0 || ev[0].Quota != 0 {
		t.Fatalf("use of a GPU not given: %+v", ev)
	}
}

func TestGuardKillFailureIsReported(t *testing.T) {
	g, k, limits := fixture()
	k.fail = errors.New("pid 700 is in cgroup 90 now")
	ev := g.Check(time.Unix(1000, 0), []gpuview.SampleProc{{GPU: 0, PID: 700, UsedBytes: 9 * gib}}, limits)
	if len(ev) != 1 || ev[0].Err == nil || ev[0].Victim != 0 || !strings.Contains(ev[0].Err.Error(), "cgroup 90") {
		t.Fatalf("failed kill: %+v", ev)
	}
}

func TestParseSampleRejectsHostileLines(t *testing.T) {
	for _, line := range []string{
		`{"t":1,"procs":[{"gpu":-1,"pid":3,"usedBytes":1}]}`,
		`{"t":1,"procs":[{"gpu":64,"pid":3,"usedBytes":1}]}`,
		`{"t":1,"procs":[{"gpu":0,"pid":0,"usedBytes":1}]}`,
		`{"t":1,"procs":[{"gpu":0,"pid":3,"usedBytes":1,"extra":1}]}`,
		`{"t":1,"procs":[{"gpu":0,"pid":3,"usedBytes":-5}]}`,
		`[1,2]`,
		``,
	} {
		if _, err := ParseSample([]byte(line)); err == nil {
			t.Errorf("ParseSample(%q) accepted", line)
		}
	}
	s, err := ParseSample([]byte(`{"t":5,"procs":[{"gpu":1,"pid":3,"usedBytes":7}]}`))
	if err != nil || len(s.Procs) != 1 || s.Procs[0].UsedBytes != 7 {
		t.Fatalf("good line: %+v, %v", s, err)
	}
}

func TestParseActionNamesTheBadValue(t *testing.T) {
	if a, err := ParseAction(""); err != nil || a != ActionKill {
		t.Fatalf("default: %v, %v", a, err)
	}
	if _, err := ParseAction("terminate"); err == nil || !strings.Contains(err.Error(), `"terminate"`) {
		t.Fatalf("bad action: %v", err)
	}
}

// TestGuardSaysWhyBeforeItKills: the reason (the container's termination
// message) is written before the signal, so the runtime never sees the exit
// without it.
func TestGuardSaysWhyBeforeItKills(t *testing.T) {
	_, k, limits := fixture()
	var order []string
	g := New(Options{ContextMargin: 512 << 20, BeforeKill: func(ev Event) {
		order = append(order, fmt.Sprintf("explain %d (%d killed so far)", ev.Victim, len(k.killed)))
	}}, func(pid uint32) (cgroup.ID, error) { return 70, nil }, k)
	g.Check(time.Unix(1000, 0), []gpuview.SampleProc{{GPU: 0, PID: 700, UsedBytes: 9 * gib}}, limits)
	if len(order) != 1 || order[0] != "explain 700 (0 killed so far)" || len(k.killed) != 1 {
		t.Fatalf("order %q, kills %v: want the reason first, then the kill", order, k.killed)
	}
}

// TestHostPIDNamespace: the guard runs only in the host's pid namespace
// (NVML's pids are the host's); a process in a nested one (here a stand-in
// status file, as a pod without hostPID has) is refused with the reason.
func TestHostPIDNamespace(t *testing.T) {
	if err := HostPIDNamespace("/"); err != nil {
		t.Fatalf("in the host's own namespace: %v", err)
	}
	other := t.TempDir()
	if err := os.MkdirAll(filepath.Join(other, "proc/self"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "proc/self/status"), []byte("Name:\tagent\nNSpid:\t48211\t7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := HostPIDNamespace(other); err == nil || !strings.Contains(err.Error(), "hostPID") {
		t.Fatalf("a nested namespace: %v", err)
	}
}
