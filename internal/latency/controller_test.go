package latency

import (
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/board"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
)

// node is a fake host: its tenants as admission wrote them and the usage
// files their device runtimes keep (the counters only grow, as theirs do).
type node struct {
	hosts map[bpf.TenantID]board.HostTenant
	usage map[bpf.TenantID]*board.Usage
	sm    uint32
	pace  uint32
	gpus  uint64
	depth uint32
	sets  int
}

func (n *node) Tenants() (map[bpf.TenantID]board.HostTenant, error) { return n.hosts, nil }
func (n *node) SetControl(c board.Control) {
	n.sm, n.pace, n.gpus, n.depth, n.sets = c.SMPercent, c.Pace, c.PaceGPUs, c.PaceDepth, n.sets+1
}
func (n *node) read(dir string) (board.Usage, error) {
	id, _ := strconv.Atoi(filepath.Base(dir))
	u, ok := n.usage[bpf.TenantID(id)]
	if !ok {
		return board.Usage{}, fmt.Errorf("open %s: %w", dir, fs.ErrNotExist)
	}
	return *u, nil
}

// requests adds count requests of duration d to a latency-critical tenant.
func (n *node) requests(id bpf.TenantID, count uint64, d time.Duration) {
	u := n.usage[id]
	u.Latency[board.BucketOf(d)] += count
	u.LCRequests += count
}

func newNode() *node {
	return &node{
		hosts: map[bpf.TenantID]board.HostTenant{
			1: {Class: tenantcfg.ClassLatencyCritical, Target: tenantcfg.LatencyTarget{P99: 800 * time.Microsecond}},
			2: {Class: tenantcfg.ClassBestEffort, SMPercent: 40},
			3: {Class: tenantcfg.ClassBestEffort, SMPercent: 40},
		},
		usage: map[bpf.TenantID]*board.Usage{1: {LiveProcesses: 1}, 2: {LiveProcesses: 1}, 3: {LiveProcesses: 1}},
	}
}

func newController(n *node, cfg Config) (*Controller, *test.Hook) {
	l, hook := test.NewNullLogger()
	c := New(cfg, n, "/acct", n, logrus.NewEntry(l))
	c.read = n.read
	return c, hook
}

// tick moves the clock one interval on and steps the controller.
func tick(c *Controller, now *time.Time) Status {
	*now = now.Add(time.Second)
	return c.Step(*now)
}

func tenantStatus(t *testing.T, s Status, id bpf.TenantID) TenantStatus {
	t.Helper()
	for _, ts := range s.Tenants {
		if ts.ID == id {
			return ts
		}
	}
	t.Fatalf("tenant %d not in the status %+v", id, s)
	return TenantStatus{}
}

// A missed absolute target paces best-effort launches at once and gives
// best-effort contexts made from then on a smaller share; once every
// target holds with room, pacing goes first, then the share grows back.
func TestMissedTargetPacesThenRelaxes(t *testing.T) {
	n := newNode()
	c, hook := newController(n, Config{})
	now := time.Unix(1000, 0)
	s := c.Step(now) // first read: the baseline of the counters
	if n.sm != 30 || n.pace != board.PaceNone {
		t.Fatalf("start: share %d pace %d, want the budget 60 split over 2 best-effort tenants (30), no pacing", n.sm, n.pace)
	}
	n.requests(1, 980, 300*time.Microsecond)
	n.requests(1, 20, 2*time.Millisecond)
	s = tick(c, &now)
	lc := tenantStatus(t, s, 1)
	if lc.Verdict != Missed || lc.P99 < 2*time.Millisecond || lc.TargetP99 != 800*time.Microsecond || lc.Requests != 1000 {
		t.Fatalf("lc = %+v, want missed with p99 about 2ms over 1000 requests", lc)
	}
	if n.pace != board.PaceRequest || n.sm != 21 || s.Budget != 42 {
		t.Fatalf("after a miss: share %d pace %d budget %.0f, want 21 (60*0.7/2), paced, 42", n.sm, n.pace, s.Budget)
	}
	if n.depth != 0 || s.PaceDepth != 0 {
		t.Fatalf("after a miss: pace depth %d on the board, %d in the status, want the default: no bound (0)", n.depth, s.PaceDepth)
	}
	if !logged(hook, "latency target missed") {
		t.Error("the miss is not logged")
	}
	// Healthy from here: 2000 fast requests an interval push the slow ones
	// out of the window (5 intervals), then 3 calm intervals turn pacing
	// off; once a new best-effort process has started (and so tried the
	// cut share), 3 more raise the budget by 5.
	var paceOffAt, raisedAt int
	for i := 1; i <= 20; i++ {
		if i == 10 {
			n.usage[3].LiveProcesses++
		}
		n.requests(1, 2000, 300*time.Microsecond)
		s = tick(c, &now)
		if paceOffAt == 0 && n.pace == board.PaceNone {
			paceOffAt = i
		}
		if raisedAt == 0 && s.Budget > 42 {
			raisedAt = i
		}
	}
	if n.depth != 0 {
		t.Errorf("pacing off: pace depth %d left on the board, want 0", n.depth)
	}
	if paceOffAt == 0 || raisedAt == 0 || raisedAt <= paceOffAt {
		t.Fatalf("pacing off at interval %d, budget raised at %d: want pacing off first, then the budget", paceOffAt, raisedAt)
	}
	if lc := tenantStatus(t, s, 1); lc.Verdict != Met || lc.P99 > 350*time.Microsecond {
		t.Errorf("lc = %+v, want met at about 300us", lc)
	}
}

// A relative target is judged against the tenant's own p99 while no
// best-effort process is live: unknown before that, then 1.5x of it.
func TestRelativeTargetLearnsSoloBaseline(t *testing.T) {
	n := newNode()
	n.hosts[1] = board.HostTenant{Class: tenantcfg.ClassLatencyCritical, Target: tenantcfg.LatencyTarget{RatioMilli: 1500}}
	n.usage[2].LiveProcesses, n.usage[3].LiveProcesses = 0, 0
	c, _ := newController(n, Config{})
	now := time.Unix(1000, 0)
	c.Step(now)
	if lc := tenantStatus(t, c.Status(), 1); lc.Verdict != NoBaseline {
		t.Fatalf("before any request: %+v, want no-baseline", lc)
	}
	n.requests(1, 500, 200*time.Microsecond)
	s := tick(c, &now)
	lc := tenantStatus(t, s, 1)
	if lc.SoloP99 < 200*time.Microsecond || lc.SoloP99 > 230*time.Microsecond || lc.Verdict != Met {
		t.Fatalf("alone: %+v, want a solo p99 of about 200us and the target met", lc)
	}
	// best-effort work starts; the tenant's requests take 400us: 2x alone
	n.usage[2].LiveProcesses, n.usage[3].LiveProcesses = 1, 1
	for i := 0; i < 5; i++ {
		n.requests(1, 500, 400*time.Microsecond)
		s = tick(c, &now)
	}
	lc = tenantStatus(t, s, 1)
	if lc.Verdict != Missed || lc.TargetP99 != lc.SoloP99*3/2 {
		t.Fatalf("beside best-effort work: %+v, want missed against 1.5x the solo p99", lc)
	}
	if lc.SoloP99 > 230*time.Microsecond {
		t.Errorf("the solo baseline took in requests made beside best-effort work: %v", lc.SoloP99)
	}
	if n.pace != board.PaceRequest {
		t.Error("missed, not paced")
	}
}

// Without a latency target on the node the controller publishes nothing
// of its own: the policies' shares and no pacing. Too few requests are
// not judged.
func TestNoTargetNoControl(t *testing.T) {
	n := newNode()
	n.hosts[1] = board.HostTenant{Class: tenantcfg.ClassLatencyCritical}
	c, _ := newController(n, Config{})
	c.Step(time.Unix(1000, 0))
	n.requests(1, 1000, 5*time.Millisecond)
	s := c.Step(time.Unix(1001, 0))
	if n.sm != 0 || n.pace != board.PaceNone || s.Targets != 0 {
		t.Errorf("no target: share %d pace %d targets %d, want 0, none, 0", n.sm, n.pace, s.Targets)
	}
	if lc := tenantStatus(t, s, 1); lc.P99 < 5*time.Millisecond || lc.Verdict != NoTarget {
		t.Errorf("lc = %+v: the p99 is still measured, with no verdict", lc)
	}

	n = newNode()
	c, _ = newController(n, Config{})
	c.Step(time.Unix(1000, 0))
	n.requests(1, 10, 5*time.Millisecond)
	s = c.Step(time.Unix(1001, 0))
	if lc := tenantStatus(t, s, 1); lc.Verdict != TooFew || n.pace != board.PaceNone || s.Budget != Defaults.Budget {
		t.Errorf("10 requests: %+v pace %d budget %.0f, want too-few and nothing changed", lc, n.pace, s.Budget)
	}
}

// A best-effort tenant whose processes live but complete no GPU work for
// StallAfter is reported, once, and clears when it moves again.
func TestStalledBestEffort(t *testing.T) {
	n := newNode()
	c, hook := newController(n, Config{StallAfter: 10 * time.Second})
	now := time.Unix(1000, 0)
	for i := 0; i < 12; i++ {
		n.usage[3].Synced++ // tenant 3 progresses; 2 does not
		c.Step(now)
		now = now.Add(time.Second)
	}
	s := c.Status()
	if be := tenantStatus(t, s, 2); !be.Stalled || be.StalledFor < 10*time.Second {
		t.Errorf("tenant 2 = %+v, want stalled", be)
	}
	if be := tenantStatus(t, s, 3); be.Stalled {
		t.Errorf("tenant 3 progresses, reported stalled: %+v", be)
	}
	if got := countLogged(hook, "best-effort tenant stalled"); got != 1 {
		t.Errorf("stall logged %d times, want once", got)
	}
	n.usage[2].Synced++
	if be := tenantStatus(t, c.Step(now), 2); be.Stalled {
		t.Errorf("tenant 2 moved again, still stalled: %+v", be)
	}
	// a tenant with no live process is idle, not stalled
	n.usage[2].LiveProcesses = 0
	for i := 0; i < 12; i++ {
		tick(c, &now)
	}
	if be := tenantStatus(t, c.Status(), 2); be.Stalled {
		t.Errorf("no live process, reported stalled: %+v", be)
	}
}

// The budget never goes below MinBudget however often the target is
// missed (a latency-critical tenant's own counters, which it writes, can
// shrink the others' share only that far), and a tenant whose file cannot
// be read counts as idle.
func TestBudgetFloorAndUnreadable(t *testing.T) {
	n := newNode()
	c, _ := newController(n, Config{MinBudget: 8})
	now := time.Unix(1000, 0)
	c.Step(now)
	// every cut seems to pay (the tenant's requests get faster, still far
	// over the target), so each is followed by the next
	d := 60 * time.Millisecond
	for i := 0; i < 100; i++ {
		n.usage[2].LiveProcesses++ // a new best-effort context every interval: each tries the cut share
		n.requests(1, 1000, d)
		d = d * 97 / 100
		tick(c, &now)
	}
	s := c.Status()
	if s.Budget != 8 || n.sm != 4 || s.NoGainBelow != 0 {
		t.Errorf("budget %.1f share %d (no gain below %.0f) after 100 misses, want the floor 8 and 4 per tenant", s.Budget, n.sm, s.NoGainBelow)
	}
	delete(n.usage, 2)
	if be := tenantStatus(t, c.Step(now.Add(time.Second)), 2); be.Processes != 0 || be.Stalled {
		t.Errorf("unreadable tenant: %+v", be)
	}
}

func logged(h *test.Hook, msg string) bool { return countLogged(h, msg) > 0 }

func countLogged(h *test.Hook, msg string) int {
	n := 0
	for _, e := range h.AllEntries() {
		if len(e.Message) >= len(msg) && e.Message[:len(msg)] == msg {
			n++
		}
	}
	return n
}

// A tenant serving two kinds of request, short (250us) and long (1ms)
// alternately: beside best-effort work the short kind takes 2x while the
// long kind's tail, the p99, does not move. A relative target of 1.5x is
// missed (at the percentiles of the short kind), where p99 alone would
// call it met.
func TestRelativeTargetSeesEveryKindOfRequest(t *testing.T) {
	n := newNode()
	n.hosts[1] = board.HostTenant{Class: tenantcfg.ClassLatencyCritical, Target: tenantcfg.LatencyTarget{RatioMilli: 1500}}
	n.usage[2].LiveProcesses, n.usage[3].LiveProcesses = 0, 0
	c, _ := newController(n, Config{})
	now := time.Unix(1000, 0)
	c.Step(now)
	n.requests(1, 500, 250*time.Microsecond)
	n.requests(1, 500, time.Millisecond)
	tick(c, &now)
	n.usage[2].LiveProcesses = 1
	var s Status
	for i := 0; i < 5; i++ {
		n.requests(1, 500, 500*time.Microsecond)
		n.requests(1, 500, time.Millisecond)
		s = tick(c, &now)
	}
	lc := tenantStatus(t, s, 1)
	if lc.P99 > lc.SoloP99 {
		t.Fatalf("p99 %v moved from %v alone: the test means it not to", lc.P99, lc.SoloP99)
	}
	if lc.Verdict != Missed || lc.Ratio < 1.2 || lc.WorstQuantile > 0.5 {
		t.Errorf("lc = %+v: want missed, about 2/1.5 = 1.33 of the target, at a percentile of the short requests", lc)
	}
	if n.pace != board.PaceRequest {
		t.Error("missed, not paced")
	}
}

// The budget is for contexts made from now on: while a miss lasts and no
// best-effort process starts, it is cut once, not to the floor; a new
// process lets it move one more step.
func TestBudgetWaitsForANewContext(t *testing.T) {
	n := newNode()
	c, _ := newController(n, Config{})
	now := time.Unix(1000, 0)
	c.Step(now)
	for i := 0; i < 10; i++ {
		n.requests(1, 1000, 5*time.Millisecond)
		tick(c, &now)
	}
	if s := c.Status(); s.Budget != 42 || s.Pace != board.PaceRequest {
		t.Fatalf("10 missed intervals, no new context: budget %.0f pace %d, want one cut (42) and pacing", s.Budget, s.Pace)
	}
	// a context starts under the cut share and the requests get faster,
	// still missed: once the cut is judged (warm-up and a window), the
	// next miss cuts again
	n.usage[3].LiveProcesses++
	for i := 1; i <= warmUp+c.cfg.Window; i++ {
		n.requests(1, 1000, 3*time.Millisecond)
		s := tick(c, &now)
		if i < warmUp+c.cfg.Window && s.Budget != 42 {
			t.Fatalf("interval %d after the context started: budget %.1f, want 42 until the cut is judged", i, s.Budget)
		}
	}
	if s := c.Status(); math.Abs(s.Budget-29.4) > 0.01 {
		t.Errorf("the cut paid, still missed: budget %.1f, want 42*0.7", s.Budget)
	}
}

// A cut that buys nothing is undone: the H100's case, where a best-effort
// share of 21% took a request's tail well down from 30% and 15% took it
// no further, at a cost in the trainers' throughput. The budget goes back
// to the last share that paid, misses are paced but cut no further, the
// operator is told, and after noGainFor a miss may try again.
func TestCutThatBuysNothingIsUndone(t *testing.T) {
	n := newNode()
	c, hook := newController(n, Config{})
	now := time.Unix(1000, 0)
	c.Step(now)
	judge := func(d time.Duration) Status { // a context starts, then the cut is judged at requests of d
		n.usage[3].LiveProcesses++
		var s Status
		for i := 0; i < warmUp+c.cfg.Window; i++ {
			n.requests(1, 1000, d)
			s = tick(c, &now)
		}
		return s
	}
	n.requests(1, 1000, 2100*time.Microsecond)
	if s := tick(c, &now); s.Budget != 42 {
		t.Fatalf("first miss: budget %.1f, want 42", s.Budget)
	}
	s := judge(1600 * time.Microsecond) // paid: the next miss cuts again
	if math.Abs(s.Budget-29.4) > 0.01 || !logged(hook, "a smaller best-effort share took latency down") {
		t.Fatalf("a cut that paid: budget %.1f, want the next cut 29.4, and the gain logged", s.Budget)
	}
	s = judge(1600 * time.Microsecond) // bought nothing
	if s.Budget != 42 || s.NoGainBelow != 42 || n.sm != 21 {
		t.Fatalf("a cut that bought nothing: budget %.1f (no gain below %.1f), share %d, want back to 42 and 21 a tenant", s.Budget, s.NoGainBelow, n.sm)
	}
	if s.Pace != board.PaceRequest || !logged(hook, "a smaller best-effort share bought no latency") {
		t.Fatalf("after the undone cut: pace %d, want still paced, and the undoing logged", s.Pace)
	}
	if lc := tenantStatus(t, s, 1); !lc.NoShareGain || !strings.Contains(lc.Cell(), "a smaller best-effort share bought nothing") {
		t.Errorf("the tenant table does not say the share bought nothing: %q", lc.Cell())
	}
	for i := 0; i < 3; i++ {
		if s = judge(1600 * time.Microsecond); s.Budget != 42 {
			t.Fatalf("misses with new contexts after the undone cut: budget %.1f, want it kept at 42", s.Budget)
		}
	}
	now = now.Add(noGainFor)
	n.requests(1, 1000, 1600*time.Microsecond)
	if s = tick(c, &now); s.NoGainBelow != 0 || math.Abs(s.Budget-29.4) > 0.01 {
		t.Errorf("after %v: budget %.1f (no gain below %.0f), want the bound gone and the miss cutting again", noGainFor, s.Budget, s.NoGainBelow)
	}
}

// cutByTenant1 is a node with a second latency-critical tenant (4)
// where tenant 1's miss (3 ms requests against 800us) has made the first
// cut (60 to 42); tenant 4 sent requests of d in that interval (0: none).
func cutByTenant1(t *testing.T, d time.Duration) (*node, *Controller, *test.Hook, time.Time) {
	t.Helper()
	n := newNode()
	n.hosts[4] = board.HostTenant{Class: tenantcfg.ClassLatencyCritical, Target: tenantcfg.LatencyTarget{P99: 800 * time.Microsecond}}
	n.usage[4] = &board.Usage{LiveProcesses: 1}
	c, hook := newController(n, Config{})
	now := time.Unix(1000, 0)
	c.Step(now)
	n.requests(1, 1000, 3*time.Millisecond)
	if d > 0 {
		n.requests(4, 1000, d)
	}
	if s := tick(c, &now); s.Budget != 42 {
		t.Fatalf("first miss: budget %.1f, want 42", s.Budget)
	}
	return n, c, hook, now
}

// A cut is judged by the tenant whose miss made it: another latency-
// critical tenant's ratio, as high as the first one's was, does not undo
// it, and a cut whose tenant left stands (the next miss, with a new
// context, cuts again).
func TestCutJudgedByTheSameTenant(t *testing.T) {
	n, c, hook, now := cutByTenant1(t, 2*time.Millisecond)
	delete(n.hosts, 1) // tenant 1 leaves; tenant 4 misses on, as far as tenant 1 did
	n.usage[3].LiveProcesses++
	var s Status
	for i := 0; i < 2*(warmUp+c.cfg.Window); i++ {
		n.requests(4, 1000, 3*time.Millisecond)
		s = tick(c, &now)
	}
	if s.NoGainBelow != 0 || logged(hook, "a smaller best-effort share bought no latency") {
		t.Fatalf("a cut undone by another tenant's ratio: budget %.1f, no gain below %.0f", s.Budget, s.NoGainBelow)
	}
	if math.Abs(s.Budget-29.4) > 0.01 {
		t.Errorf("the cut's tenant left, a context started, tenant 4 still missed: budget %.1f, want the next cut 29.4", s.Budget)
	}
}

// A cut whose tenant stops sending requests (never judged again) does not
// block the cuts forever: after trialPatience intervals it stands, and
// another tenant's miss cuts again.
func TestCutWhoseTenantFallsSilentStands(t *testing.T) {
	n, c, _, now := cutByTenant1(t, 0)
	n.usage[3].LiveProcesses++ // the cut is tried; tenant 1 falls silent, tenant 4 misses a little
	var s Status
	for i := 1; i <= trialPatience+1; i++ {
		n.requests(4, 1000, time.Millisecond)
		if s = tick(c, &now); i < trialPatience && s.Budget != 42 {
			t.Fatalf("interval %d: budget %.1f, want 42 while the cut waits for its tenant", i, s.Budget)
		}
	}
	if math.Abs(s.Budget-29.4) > 0.01 || s.NoGainBelow != 0 {
		t.Errorf("after %d intervals with the cut's tenant silent: budget %.1f (no gain below %.0f), want the next cut 29.4", trialPatience, s.Budget, s.NoGainBelow)
	}
}

// A latency-critical process's first intervals (its warm-up) are left out
// of its window and of its solo base.
func TestWarmUpLeftOut(t *testing.T) {
	n := newNode()
	n.hosts[1] = board.HostTenant{Class: tenantcfg.ClassLatencyCritical, Target: tenantcfg.LatencyTarget{RatioMilli: 1500}}
	n.usage[1].LiveProcesses, n.usage[2].LiveProcesses, n.usage[3].LiveProcesses = 0, 0, 0
	c, _ := newController(n, Config{})
	now := time.Unix(1000, 0)
	c.Step(now)
	n.usage[1].LiveProcesses = 1 // the process starts: its first requests take 30 ms
	for i := 0; i < 2; i++ {
		n.requests(1, 200, 30*time.Millisecond)
		tick(c, &now)
	}
	for i := 0; i < 3; i++ {
		n.requests(1, 500, 200*time.Microsecond)
		tick(c, &now)
	}
	lc := tenantStatus(t, c.Status(), 1)
	if lc.SoloP99 > time.Millisecond || lc.P99 > time.Millisecond || lc.Requests != 1500 {
		t.Errorf("lc = %+v: the warm-up's 30 ms requests were counted", lc)
	}
}

// An agent that restarts (or is killed) takes up what its controller
// learned: a latency-critical tenant's solo base, which a busy node may
// never let it learn again, and the budget. A later tenant that reuses the
// id (another settings file: another generation) does not inherit the
// base; a state file that is a link is not read.
func TestLearnedStateSurvivesRestart(t *testing.T) {
	state := filepath.Join(t.TempDir(), StateFileName)
	n := newNode()
	n.hosts[1] = board.HostTenant{Class: tenantcfg.ClassLatencyCritical, Target: tenantcfg.LatencyTarget{RatioMilli: 1500}, Gen: 11}
	n.usage[2].LiveProcesses, n.usage[3].LiveProcesses = 0, 0
	c, _ := newController(n, Config{})
	c.SetStateFile(state)
	now := time.Unix(1000, 0)
	c.Step(now)
	n.requests(1, 500, 200*time.Microsecond) // alone
	tick(c, &now)
	n.usage[2].LiveProcesses = 1 // best-effort work, and the tenant misses
	for i := 0; i < 3; i++ {
		n.requests(1, 500, 2*time.Millisecond)
		tick(c, &now)
	}
	before := tenantStatus(t, c.Status(), 1)
	if before.SoloP99 == 0 || c.Status().Budget != 42 {
		t.Fatalf("before the restart: %+v budget %.0f", before, c.Status().Budget)
	}
	// a cut that bought nothing bounds the cuts for a while: so it does
	// after the restart (the state file carries the bound, by wall time)
	c.noGain, c.noGainUntil = 42, time.Now().Add(5*time.Minute)
	n.requests(1, 500, 2*time.Millisecond)
	tick(c, &now)

	// the agent restarts: a new controller over the same node and state file
	c2, _ := newController(n, Config{})
	c2.SetStateFile(state)
	c2.Step(now)
	for i := 0; i < 2; i++ {
		n.requests(1, 500, 2*time.Millisecond)
		tick(c2, &now)
	}
	after := tenantStatus(t, c2.Status(), 1)
	if after.SoloP99 != before.SoloP99 || after.Verdict != Missed || c2.Status().Budget != 42 || c2.Status().NoGainBelow != 42 {
		t.Errorf("after the restart: %+v budget %.0f (no gain below %.0f); want the solo base %v kept, the miss seen, the budget 42 and its bound",
			after, c2.Status().Budget, c2.Status().NoGainBelow, before.SoloP99)
	}

	// another tenant under id 1 (a new settings file)
	n.hosts[1] = board.HostTenant{Class: tenantcfg.ClassLatencyCritical, Target: tenantcfg.LatencyTarget{RatioMilli: 1500}, Gen: 12}
	c3, _ := newController(n, Config{})
	c3.SetStateFile(state)
	c3.Step(now)
	if got := tenantStatus(t, c3.Status(), 1); got.SoloP99 != 0 {
		t.Errorf("a new tenant under a reused id inherited the solo base %v", got.SoloP99)
	}

	link := filepath.Join(t.TempDir(), "link.json")
	if err := os.Symlink(state, link); err != nil {
		t.Fatal(err)
	}
	c4, hook := newController(n, Config{})
	c4.SetStateFile(link)
	if !logged(hook, "learned state not read") || c4.budget != Defaults.Budget {
		t.Errorf("a state file behind a link was taken up (budget %.0f)", c4.budget)
	}
}

// A tenant's processes that exit with a failure status are reported:
// counted from when the controller first saw the tenant, logged once per
// new failure, not left silent.
func TestFailedExitsReported(t *testing.T) {
	n := newNode()
	n.usage[2].FailedExits = 4 // before the controller ran: not its to report
	c, hook := newController(n, Config{})
	now := time.Unix(1000, 0)
	c.Step(now)
	if be := tenantStatus(t, c.Status(), 2); be.FailedExits != 0 {
		t.Fatalf("failures before the controller saw the tenant reported: %+v", be)
	}
	n.usage[2].FailedExits, n.usage[2].Exits = 5, 5
	for i := 0; i < 3; i++ {
		tick(c, &now)
	}
	if be := tenantStatus(t, c.Status(), 2); be.FailedExits != 1 || be.Cell() != "1 failed exit" {
		t.Errorf("tenant 2 = %+v, cell %q; want one failed exit reported", be, be.Cell())
	}
	if got := countLogged(hook, "a process of the tenant exited with a failure status"); got != 1 {
		t.Errorf("logged %d times, want once", got)
	}
}

// Pacing is scoped to the GPUs of the latency-critical tenants that miss,
// where their GPUs are known (a container given GPU memory by the device
// plugin); one whose GPUs are not known paces every GPU.
func TestPacingScopedToTheMissingTenantsGPUs(t *testing.T) {
	n := newNode()
	n.hosts[1] = board.HostTenant{Class: tenantcfg.ClassLatencyCritical, Target: tenantcfg.LatencyTarget{P99: 800 * time.Microsecond}, HostGPUs: 1 << 2}
	c, _ := newController(n, Config{})
	now := time.Unix(1000, 0)
	c.Step(now)
	n.requests(1, 1000, 5*time.Millisecond)
	tick(c, &now)
	if n.pace != board.PaceRequest || n.gpus != 1<<2 {
		t.Fatalf("a miss on GPU 2: pace %d gpus %#x, want paced on GPU 2 only", n.pace, n.gpus)
	}
	// a second latency-critical tenant, GPUs not known, misses too: every GPU
	n.hosts[4] = board.HostTenant{Class: tenantcfg.ClassLatencyCritical, Target: tenantcfg.LatencyTarget{P99: 800 * time.Microsecond}}
	n.usage[4] = &board.Usage{LiveProcesses: 1}
	c.Step(now.Add(time.Second))
	n.requests(4, 1000, 5*time.Millisecond)
	n.requests(1, 1000, 5*time.Millisecond)
	c.Step(now.Add(2 * time.Second))
	if n.pace != board.PaceRequest || n.gpus != 0 {
		t.Errorf("a miss where the GPUs are not known: pace %d gpus %#x, want every GPU (0)", n.pace, n.gpus)
	}
}

// The pacing depth is the operator's (latencyControl.paceDepth): a bound
// is published with the pacing, "no bound" publishes none, and a bound
// above the board's largest is clamped to it.
func TestPaceDepthConfigured(t *testing.T) {
	for _, tc := range []struct {
		cfg  int
		want uint32
	}{{cfg: 0, want: 0}, {cfg: -1, want: 0}, {cfg: 1, want: 1}, {cfg: 2, want: 2}, {cfg: 99, want: board.PaceDepthMax}} {
		n := newNode()
		c, _ := newController(n, Config{PaceDepth: tc.cfg})
		now := time.Unix(1000, 0)
		c.Step(now)
		n.requests(1, 980, 300*time.Microsecond)
		n.requests(1, 20, 2*time.Millisecond)
		s := c.Step(now.Add(time.Second))
		if n.pace != board.PaceRequest || n.depth != tc.want || s.PaceDepth != tc.want {
			t.Errorf("PaceDepth %d: pace %d depth %d (status %d), want paced with depth %d", tc.cfg, n.pace, n.depth, s.PaceDepth, tc.want)
		}
	}
}

// A relative target on a node whose best-effort work never stops: the
// controller holds the best-effort launches on the tenant's GPUs, leaves
// the first held interval out (kernels already running finish in it),
// takes the next as the tenant's solo base, and lets the launches go at
// once. Another tenant never seen alone waits for holdEvery; a hold whose
// tenant makes too few requests ends after holdSteps.
func TestNeverAloneMeasuredByHold(t *testing.T) {
	n := newNode()
	n.hosts[1] = board.HostTenant{Class: tenantcfg.ClassLatencyCritical, Target: tenantcfg.LatencyTarget{RatioMilli: 1500}, HostGPUs: 1 << 1}
	c, hook := newController(n, Config{StallAfter: time.Second})
	now := time.Unix(1000, 0)
	step := func(d time.Duration) Status {
		now = now.Add(d)
		return c.Step(now)
	}
	step(0)
	n.requests(1, 500, 400*time.Microsecond) // beside the trainers
	s := step(time.Second)
	if n.pace != board.PaceHold || n.gpus != 1<<1 || s.HoldTenant != 1 || tenantStatus(t, s, 1).Verdict != NoBaseline {
		t.Fatalf("never alone: pace %d gpus %#x hold %d, want best-effort launches held on GPU 1 for tenant 1", n.pace, n.gpus, s.HoldTenant)
	}
	if !logged(hook, "latency-critical tenant never seen alone") {
		t.Error("the hold is not logged")
	}
	if lc := tenantStatus(t, s, 1); !lc.MeasuringAlone || !strings.Contains(lc.cell(), "measuring alone") {
		t.Errorf("the tenant table shows %q (measuring %v), want it said that the tenant is measured alone", lc.cell(), lc.MeasuringAlone)
	}
	n.requests(1, 500, 300*time.Microsecond) // the first held interval: best-effort kernels still finish
	if s = step(time.Second); n.pace != board.PaceHold {
		t.Fatalf("after the first held interval: pace %d, want still held", n.pace)
	}
	if be := tenantStatus(t, s, 2); be.Stalled {
		t.Errorf("a trainer held for the measurement is reported stalled: %+v", be)
	}
	n.requests(1, 500, 200*time.Microsecond) // alone
	s = step(time.Second)
	lc := tenantStatus(t, s, 1)
	if n.pace == board.PaceHold || s.HoldTenant != 0 {
		t.Fatalf("solo base measured: pace %d hold %d, want the launches to go again", n.pace, s.HoldTenant)
	}
	if lc.SoloP99 < 200*time.Microsecond || lc.SoloP99 > 230*time.Microsecond {
		t.Fatalf("solo p99 %v, want about 200us: only the interval after the first held one", lc.SoloP99)
	}
	if lc.P99 < 390*time.Microsecond {
		t.Errorf("p99 judged %v at the end of the hold, want the 400us before it: held intervals are no load's", lc.P99)
	}
	for i := 0; i < 5; i++ {
		n.requests(1, 500, 400*time.Microsecond)
		s = step(time.Second)
	}
	if lc = tenantStatus(t, s, 1); lc.Verdict != Missed || n.pace != board.PaceRequest {
		t.Fatalf("2x alone beside the trainers: %+v pace %d, want missed and paced", lc, n.pace)
	}

	// a second tenant never seen alone, 8 s after the first hold began
	n.hosts[4] = board.HostTenant{Class: tenantcfg.ClassLatencyCritical, Target: tenantcfg.LatencyTarget{RatioMilli: 2000}}
	n.usage[4] = &board.Usage{LiveProcesses: 1}
	step(time.Second)
	n.requests(4, 500, 400*time.Microsecond)
	if s = step(time.Second); n.pace == board.PaceHold {
		t.Fatalf("a second hold %v after the first: want none before %v", 8*time.Second, holdEvery)
	}
	step(holdEvery)
	n.requests(4, 10, 400*time.Microsecond) // requests flow: it qualifies
	if s = step(time.Second); n.pace != board.PaceHold || s.HoldTenant != 4 || n.gpus != 0 {
		t.Fatalf("after holdEvery: pace %d hold %d gpus %#x, want tenant 4 measured on every GPU (its GPUs not known)", n.pace, s.HoldTenant, n.gpus)
	}
	for i := 0; i < holdSteps; i++ { // it makes no more requests
		s = step(time.Second)
	}
	if n.pace == board.PaceHold || tenantStatus(t, s, 4).Verdict != NoBaseline || !logged(hook, "latency-critical tenant not measured alone") {
		t.Errorf("a hold with too few requests: pace %d after %d intervals, want it ended (and said) with no base", n.pace, holdSteps)
	}
}
