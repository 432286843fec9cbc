// Package latency is the agent's latency controller: it holds the latency
// targets of latency-critical tenants (the policy's priority.latencyTarget)
// by choosing, for the node's best-effort tenants, the MPS share their
// contexts get when they are created and the pacing of their launches while
// a latency-critical request runs. It measures what it controls: each
// latency-critical tenant's request p99 from the histogram its device
// runtime keeps in the usage file, and each best-effort tenant's progress
// (its completed waits for the GPU). docs/priority-control.md says what it
// does and what it cannot.
//
// The controller is a loop of Step calls. Its inputs are the host's own
// view of the tenants (board.Source: the settings admission wrote, never
// what a tenant says of itself) and the tenants' usage files (hostile
// input: read through devrt/board, bounded, no links); its outputs are two
// fields of the read-only board every container maps (board.SetControl)
// and its Status, which the agent's API, metrics and logs show.
package latency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/board"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/lib/atomicfile"
)

// Config is how the controller runs. The zero value of a field is its
// default (Defaults).
type Config struct {
	// Interval between two Steps.
	Interval time.Duration
	// Window is how many intervals the p99 is taken over.
	Window int
	// MinRequests is the fewest requests in the window a p99 is judged on.
	MinRequests uint64
	// Budget is the share of the SMs (percent) the best-effort tenants'
	// contexts get together at start, split evenly among the best-effort
	// tenants; the controller lowers it while a target is missed and
	// raises it again while every target holds with room.
	Budget float64
	// MinBudget and MaxBudget bound it.
	MinBudget, MaxBudget float64
	// StallAfter: a best-effort tenant with live processes whose device
	// runtime counts no completed wait for the GPU and no launch for this
	// long is reported stalled.
	StallAfter time.Duration
	// PaceDepth: while pacing, at most this many of a best-effort
	// process's launches are unfinished when it launches again
	// (1..board.PaceDepthMax); 0 (the default) or negative: no bound,
	// launches are held only during requests. Off by default: on the H100
	// it cost trainers 10-17% of their throughput and did not lower the
	// latency-critical tail (docs/priority-control.md).
	PaceDepth int
}

// Defaults are Config's defaults. Budget 60: on the H200 two ResNet-50
// trainers at 30% each held a latency-critical graph p99 at 1.5x its solo
// figure with 0.86 of their no-policy throughput (docs/benchmarks.md).
var Defaults = Config{Interval: time.Second, Window: 5, MinRequests: 50, Budget: 60, MinBudget: 4, MaxBudget: 100,
	StallAfter: 30 * time.Second}

func (c Config) withDefaults() Config {
	d := Defaults
	if c.Interval > 0 {
		d.Interval = c.Interval
	}
	if c.Window > 0 {
		d.Window = c.Window
	}
	if c.MinRequests > 0 {
		d.MinRequests = c.MinRequests
	}
	if c.MinBudget > 0 {
		d.MinBudget = c.MinBudget
	}
	if c.MaxBudget > 0 {
		d.MaxBudget = min(c.MaxBudget, 100)
	}
	if c.Budget > 0 {
		d.Budget = c.Budget
	}
	d.Budget = min(max(d.Budget, d.MinBudget), d.MaxBudget)
	if c.StallAfter > 0 {
		d.StallAfter = c.StallAfter
	}
	switch {
	case c.PaceDepth < 0:
		d.PaceDepth = 0
	case c.PaceDepth > 0:
		d.PaceDepth = min(c.PaceDepth, board.PaceDepthMax)
	}
	return d
}

// The controller's steps: a missed target cuts the budget by cutFactor
// and turns pacing on; relaxAfter intervals in a row with every target
// held under relaxBelow of it turn pacing off, then raise the budget by
// raiseStep a time.
//
// The budget is what best-effort contexts created from now on get: it
// moves one step, then waits for a best-effort process to start (and so
// try it) before it moves again; a miss that lasts while no context is
// made would otherwise drive it to the floor for nothing.
//
// warmUp intervals of a latency-critical tenant's requests are left out
// after one of its processes starts: a framework's first requests (its
// kernels' first loads, autotuning) run tens of milliseconds, and they
// would set the base of a relative target, or a miss, that is no request's.
const (
	warmUp     = 2
	cutFactor  = 0.7
	relaxBelow = 0.75
	relaxAfter = 3
	raiseStep  = 5.0
)

// A cut is tried before the next: once a best-effort process has started
// under the smaller share, and the latency-critical tenant whose miss made
// the cut was judged for warmUp+Window intervals, that tenant's ratio is
// compared with the one that made the cut. A cut that took it down by
// less than cutGain of it bought nothing the trainers' throughput was
// worth: the budget goes back, and for noGainFor no cut goes below it
// (misses are still paced). A cut whose tenant left, or was not judged
// for trialPatience intervals once tried (it sent too few requests), stands
// unjudged, and the next miss may cut again. Measured
// on the H100 (docs/priority-control.md): from 32% to 22% a share took a
// request's tail from 2.1x to 1.6x of alone, from 22% to 17% nothing, at
// 0.74 and 0.63 of the trainers' throughput; cutting on to the floor would
// have starved them for no request.
const (
	cutGain       = 0.05
	noGainFor     = 10 * time.Minute
	trialPatience = 60
)

// cutTrial is a cut of the budget waiting to be judged.
type cutTrial struct {
	from, to float64      // the budget before and after the cut
	tenant   bpf.TenantID // the latency-critical tenant whose miss made it
	before   float64      // its ratio then
	tried    bool         // a best-effort process started under it
	settle   int          // judged intervals still to wait once tried
	waited   int          // intervals since it was tried
}

// A relative target needs the tenant's latency alone, and on a busy node a
// new latency-critical container may never run alone. The controller then
// holds the best-effort launches on the tenant's GPUs (board.PaceHold) for
// at most holdSteps intervals: the first lets the kernels already running
// finish, the requests of the later ones are the tenant's solo base; it
// ends as soon as that base has MinRequests requests. At most one hold
// every holdEvery on the node, so latency-critical containers that come
// and go cannot hold best-effort work for more than holdSteps/holdEvery of
// the time (4 s in 2 min: 3%); the device runtime bounds each wait by
// board.PaceHoldMax besides.
const (
	holdSteps = 4
	holdDrain = 1
	holdEvery = 2 * time.Minute
)

// hold is a measurement alone in progress.
type hold struct {
	id    bpf.TenantID
	gpus  uint64 // the tenant's host GPUs (0: not known, every GPU)
	steps int    // Steps since it was published
	since time.Time
}

// Verdict is what the controller says of a latency-critical tenant's target.
type Verdict string

const (
	Met        Verdict = "met"         // p99 within the target
	Missed     Verdict = "missed"      // p99 above it
	NoBaseline Verdict = "no-baseline" // relative target, the tenant not yet seen alone
	TooFew     Verdict = "too-few"     // fewer than MinRequests requests in the window
	NoTarget   Verdict = ""            // no target
)

// TenantStatus is the controller's view of one tenant.
type TenantStatus struct {
	ID    bpf.TenantID    `json:"tenant"`
	Class tenantcfg.Class `json:"class"`
	// latency-critical
	Target    string        `json:"target"`      // as the policy gives it ("1.5x", "800us"); "" none
	TargetP99 time.Duration `json:"targetP99Ns"` // the bound in force (0: not known yet)
	P99       time.Duration `json:"p99Ns"`       // over the window (0: too few requests)
	SoloP99   time.Duration `json:"soloP99Ns"`   // with no best-effort process on the node (0: not seen)
	Requests  uint64        `json:"requests"`    // in the window
	Verdict   Verdict       `json:"verdict"`
	// Ratio is how far from the target, > 1 missed (0: not judged);
	// WorstQuantile the percentile that set it (a relative target is judged
	// over the tenant's percentiles, RelativeQuantiles).
	Ratio         float64       `json:"ratio"`
	WorstQuantile float64       `json:"worstQuantile"`
	Processes     int           `json:"processes"` // live processes (usage-file slots)
	Stalled       bool          `json:"stalled"`   // best-effort: live processes, no progress for StallAfter
	StalledFor    time.Duration `json:"stalledForNs"`
	// MeasuringAlone: the tenant is being measured alone (its best-effort
	// neighbours' launches held) for its relative target's base.
	MeasuringAlone bool `json:"measuringAlone,omitempty"`
	// NoShareGain: the target is missed and a smaller best-effort share
	// bought it nothing (Status.NoGainBelow): it is paced only.
	NoShareGain bool `json:"noShareGain,omitempty"`
	// FailedExits: the tenant's processes that used the GPU and exited
	// with a status other than 0 since the controller first saw it (a
	// trainer that stopped on a NaN loss under its share, say).
	FailedExits uint64 `json:"failedExits"`
}

// Status is the controller's state: per tenant, and what it publishes.
type Status struct {
	At        time.Time      `json:"at"`
	Tenants   []TenantStatus `json:"tenants"`
	Budget    float64        `json:"budget"`    // percent of the SMs for all best-effort contexts
	SMPercent uint32         `json:"smPercent"` // the share published for a best-effort context created now (0: the policy's)
	Pace      uint32         `json:"pace"`      // board.PaceNone or board.PaceRequest
	// PaceGPUs: with Pace, the host GPUs whose best-effort tenants are
	// paced (bit per index), those of the latency-critical tenants that
	// missed; 0: every GPU (a missing tenant's GPUs are not known).
	PaceGPUs uint64 `json:"paceGPUs"`
	// PaceDepth: with Pace, the most unfinished launches a paced
	// best-effort process may have when it launches again (0: no bound).
	PaceDepth uint32 `json:"paceDepth"`
	// HoldTenant: with Pace board.PaceHold, the latency-critical tenant
	// measured alone (its best-effort neighbours' launches held).
	HoldTenant bpf.TenantID `json:"holdTenant,omitempty"`
	// NoGainBelow: a cut of the budget below this bought no latency; until
	// it expires misses are paced but cut no further (0: none).
	NoGainBelow float64 `json:"noGainBelow,omitempty"`
	Active      bool    `json:"active"`  // a latency-critical tenant with a target is live
	Targets     int     `json:"targets"` // latency-critical tenants with a target on the node
}

// Board is where the controller publishes (board.Publisher).
type Board interface {
	SetControl(board.Control)
}

// judgeCut judges the last cut once a best-effort process started under
// it and the tenant whose miss made it has been judged for the intervals
// it takes to settle: a cut that took that tenant's ratio down by less
// than cutGain of it is undone. A cut is judged by the same tenant only
// (another one's ratio says nothing of what the cut did); when that tenant
// is gone, the cut stands unjudged.
func (c *Controller) judgeCut(now time.Time, tenants []TenantStatus) {
	tr := c.trial
	if tr == nil || !tr.tried {
		return
	}
	i := slices.IndexFunc(tenants, func(ts TenantStatus) bool { return ts.ID == tr.tenant })
	if tr.waited++; i < 0 || tr.waited > trialPatience {
		c.trial = nil // stands unjudged
		return
	}
	ts := tenants[i]
	if ts.Verdict != Met && ts.Verdict != Missed {
		return
	}
	if tr.settle--; tr.settle > 0 {
		return
	}
	c.trial = nil
	f := logrus.Fields{"tenant": uint32(tr.tenant), "from": fmt.Sprintf("%.0f", tr.from), "to": fmt.Sprintf("%.0f", tr.to),
		"ratioBefore": fmt.Sprintf("%.2f", tr.before), "ratioAfter": fmt.Sprintf("%.2f", ts.Ratio)}
	if ts.Ratio <= tr.before*(1-cutGain) {
		c.log.WithFields(f).Info("a smaller best-effort share took latency down")
		return
	}
	c.budget, c.moved = max(c.budget, tr.from), true
	c.noGain, c.noGainUntil = tr.from, now.Add(noGainFor)
	c.log.WithFields(f).WithField("for", noGainFor).
		Warn("a smaller best-effort share bought no latency: the budget goes back, and misses cut it no further (pacing only)")
}

// Controller holds the targets. Step is not safe for concurrent use;
// Status is.
type Controller struct {
	cfg      Config
	src      board.Source
	acctRoot string
	out      Board
	log      *logrus.Entry
	read     func(acctDir string) (board.Usage, error)

	tenants map[bpf.TenantID]*tenant
	budget  float64
	moved   bool // the budget moved since a best-effort process last started
	// paceGPUs: while pacing, the GPUs of the latency-critical tenants that
	// missed (bit per host index); paceAll: one of them has GPUs not known
	paceGPUs uint64
	paceAll  bool
	pace     uint32
	calm     int       // intervals in a row with every target held with room
	trial    *cutTrial // the last cut, until judged; nil none
	// noGain: a cut below this budget bought no latency, and none goes
	// below it again until noGainUntil (0: no such bound)
	noGain      float64
	noGainUntil time.Time
	hold        *hold     // a measurement alone in progress; nil none
	lastHold    time.Time // when the last one began
	srcErr      string

	statusFile string // "" none
	fileErr    string
	stateFile  string                 // "" none (SetStateFile)
	saved      map[string]savedTenant // what the state file held at start, by tenant id
	lastSaved  string                 // the state last written

	mu     sync.Mutex
	status Status
}

type tenant struct {
	prev     board.Histogram   // the counters last read
	haveHist bool              // prev was read
	havePrev bool              // the tenant was read at an earlier Step
	ring     []board.Histogram // the last Window intervals' requests
	solo     board.Histogram   // requests while no best-effort process was live
	synced   uint64
	launches uint64
	progress time.Time // when synced or launches last moved (or the tenant was first seen)
	stalled  bool      // reported (logged once per stall)
	logged   Verdict
	readErr  string
	procs    int    // live processes at the last Step
	failed0  uint64 // the usage file's failed_exits when the controller first read it
	failed   uint64 // the count last reported
	warm     int    // intervals of requests still to leave out (a process started: its warm-up)
}

// New returns a controller that reads the host's tenants from src, their
// usage files under acctRoot (<stateDir>/acct) and publishes to out.
func New(cfg Config, src board.Source, acctRoot string, out Board, log *logrus.Entry) *Controller {
	if log == nil {
		log = logrus.NewEntry(logrus.StandardLogger())
	}
	cfg = cfg.withDefaults()
	return &Controller{cfg: cfg, src: src, acctRoot: acctRoot, out: out, log: log.WithField("component", "latency"),
		read: board.ReadUsage, tenants: map[bpf.TenantID]*tenant{}, budget: cfg.Budget}
}

// Run steps every Interval until ctx ends, then publishes "no control"
// (the policies' own shares, no pacing).
func (c *Controller) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	defer c.out.SetControl(board.Control{})
	for {
		c.Step(time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Status is the state after the last Step.
func (c *Controller) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.status
	s.Tenants = slices.Clone(s.Tenants)
	return s
}

// Step reads the tenants once, judges the targets and publishes.
func (c *Controller) Step(now time.Time) Status {
	hosts, err := c.src.Tenants()
	if err != nil {
		if msg := err.Error(); msg != c.srcErr {
			c.log.WithError(err).Warn("tenants not read: control unchanged")
			c.srcErr = msg
		}
		return c.Status()
	}
	c.srcErr = ""
	if c.hold != nil {
		c.hold.steps++
	}
	ids := make([]bpf.TenantID, 0, len(hosts))
	for id := range hosts {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for id := range c.tenants {
		if _, ok := hosts[id]; !ok {
			delete(c.tenants, id)
		}
	}
	usage := make(map[bpf.TenantID]board.Usage, len(ids))
	beLive, beTenants := 0, 0
	for _, id := range ids {
		t := c.tenants[id]
		if t == nil {
			t = &tenant{progress: now}
			c.restore(id, hosts[id].Gen, t)
			c.tenants[id] = t
		}
		u, err := c.read(filepath.Join(c.acctRoot, fmt.Sprint(uint32(id))))
		if err != nil {
			// no usage file yet (no process started) or a bad one: the
			// tenant counts as idle; a bad file is said once
			if msg := err.Error(); msg != t.readErr && !isNotExist(err) {
				c.log.WithError(err).WithField("tenant", uint32(id)).Warn("usage file not read: the tenant counts as idle")
				t.readErr = msg
			}
			u = board.Usage{}
		} else {
			t.readErr = ""
		}
		usage[id] = u
		started := t.havePrev && u.LiveProcesses > t.procs
		if !t.havePrev || u.FailedExits < t.failed0 {
			t.failed0 = u.FailedExits // what failed before the controller saw the tenant (or a file made anew)
		}
		t.procs, t.havePrev = u.LiveProcesses, true
		if started && hosts[id].Class == tenantcfg.ClassLatencyCritical {
			t.warm = warmUp
		}
		if hosts[id].Class == tenantcfg.ClassBestEffort {
			if started {
				c.moved = false // a new context has the budget's share: it may move again
				if c.trial != nil && !c.trial.tried {
					c.trial.tried, c.trial.settle = true, warmUp+c.cfg.Window
				}
			}
			beTenants++
			if u.LiveProcesses > 0 {
				beLive++
			}
		}
	}

	st := Status{At: now}
	worst, judged := 0.0, 0
	var worstID bpf.TenantID
	var unknown []bpf.TenantID // relative targets never seen alone, requests flowing beside best-effort work
	var missGPUs uint64        // the GPUs of the tenants that missed this step
	missAll := false
	for _, id := range ids {
		h, u, t := hosts[id], usage[id], c.tenants[id]
		ts := TenantStatus{ID: id, Class: h.Class, Processes: u.LiveProcesses, FailedExits: u.FailedExits - t.failed0}
		if ts.FailedExits > t.failed {
			c.log.WithFields(logrus.Fields{"tenant": uint32(id), "class": h.Class.Name(), "failedExits": ts.FailedExits,
				"exits": u.Exits}).Warn("a process of the tenant exited with a failure status")
		}
		t.failed = ts.FailedExits
		switch h.Class {
		case tenantcfg.ClassLatencyCritical:
			delta := u.Latency.Sub(t.prev)
			if !t.haveHist {
				delta = board.Histogram{} // what came before the controller saw it is no interval's
			}
			if t.warm > 0 {
				delta = board.Histogram{}
				t.warm--
			}
			t.prev, t.haveHist = u.Latency, true
			if c.hold != nil && c.hold.steps > 0 {
				// an interval held for a measurement alone is no
				// interval under load: not in the window judged
				if c.hold.id == id && c.hold.steps > holdDrain {
					t.solo = t.solo.Add(delta)
				}
				t.ring = append(t.ring, board.Histogram{})
			} else {
				t.ring = append(t.ring, delta)
				if beLive == 0 {
					t.solo = t.solo.Add(delta)
				}
			}
			if len(t.ring) > c.cfg.Window {
				t.ring = t.ring[len(t.ring)-c.cfg.Window:]
			}
			var win board.Histogram
			for _, d := range t.ring {
				win = win.Add(d)
			}
			ts.Requests = win.Count()
			if ts.Requests >= c.cfg.MinRequests {
				ts.P99 = win.Quantile(0.99)
			}
			if t.solo.Count() >= c.cfg.MinRequests {
				ts.SoloP99 = t.solo.Quantile(0.99)
			}
			if h.Target.IsZero() {
				break
			}
			ts.Target = h.Target.String()
			st.Targets++
			switch {
			case h.Target.P99 > 0:
				ts.TargetP99 = h.Target.P99
			case ts.SoloP99 > 0:
				ts.TargetP99 = time.Duration(float64(ts.SoloP99) * float64(h.Target.RatioMilli) / 1000)
			}
			switch {
			case ts.TargetP99 == 0:
				ts.Verdict = NoBaseline
				if delta.Count() > 0 && beLive > 0 {
					unknown = append(unknown, id)
				}
			case ts.P99 == 0:
				ts.Verdict = TooFew
			default:
				// how far the tenant is from its target, > 1 missed: an
				// absolute target by its p99; a relative one by the worst of
				// its percentiles against the same percentile alone
				ts.Ratio = float64(ts.P99) / float64(ts.TargetP99)
				ts.WorstQuantile = 0.99
				if h.Target.RatioMilli > 0 {
					ts.Ratio, ts.WorstQuantile = shift(win, t.solo)
					ts.Ratio /= float64(h.Target.RatioMilli) / 1000
				}
				ts.Verdict = Met
				if ts.Ratio > 1 {
					ts.Verdict = Missed
					if h.HostGPUs == 0 {
						missAll = true
					}
					missGPUs |= uint64(h.HostGPUs)
				}
				judged++
				if ts.Ratio > worst {
					worst, worstID = ts.Ratio, id
				}
			}
			if u.LiveProcesses > 0 {
				st.Active = true
			}
			if ts.Verdict != t.logged && (ts.Verdict == Met || ts.Verdict == Missed) {
				c.log.WithFields(logrus.Fields{"tenant": uint32(id), "target": ts.Target, "targetP99": ts.TargetP99,
					"p99": ts.P99, "soloP99": ts.SoloP99, "requests": ts.Requests, "ratio": fmt.Sprintf("%.2f", ts.Ratio),
					"quantile": ts.WorstQuantile}).Infof("latency target %s", ts.Verdict)
				t.logged = ts.Verdict
			}
		case tenantcfg.ClassBestEffort:
			// a tenant held for a measurement alone is not stalled
			if u.Synced != t.synced || u.Launches != t.launches || u.LiveProcesses == 0 || c.hold != nil {
				t.synced, t.launches, t.progress = u.Synced, u.Launches, now
				if t.stalled {
					c.log.WithField("tenant", uint32(id)).Info("best-effort tenant progresses again")
				}
				t.stalled = false
			}
			if d := now.Sub(t.progress); u.LiveProcesses > 0 && d >= c.cfg.StallAfter {
				ts.Stalled, ts.StalledFor = true, d
				if !t.stalled {
					c.log.WithFields(logrus.Fields{"tenant": uint32(id), "processes": u.LiveProcesses, "for": d.Round(time.Second)}).
						Warn("best-effort tenant stalled: its processes live but completed no GPU work")
					t.stalled = true
				}
			}
		}
		st.Tenants = append(st.Tenants, ts)
	}

	c.stepHold(now, hosts, usage, unknown)
	if c.noGain > 0 && !now.Before(c.noGainUntil) {
		c.noGain = 0
		c.log.Info("the bound on best-effort budget cuts expired: a miss may cut again")
	}
	if c.hold == nil {
		c.judgeCut(now, st.Tenants)
	}

	// The decision: only while a latency-critical tenant with a target is
	// live and judged, and none is being measured alone; otherwise no
	// control (the policies' own shares).
	switch {
	case c.hold != nil:
		// the hold's intervals say nothing of the targets under load
	case !st.Active || judged == 0:
		c.calm = 0
		if !st.Active {
			c.pace = board.PaceNone
		}
	case worst > 1:
		c.calm = 0
		was, wasPace := c.budget, c.pace
		if !c.moved && c.trial == nil {
			c.budget = max(c.cfg.MinBudget, c.noGain, c.budget*cutFactor)
			if c.budget < was {
				c.moved, c.trial = true, &cutTrial{from: was, to: c.budget, tenant: worstID, before: worst}
			} else {
				c.budget = was
			}
		}
		if c.pace == board.PaceNone {
			c.paceGPUs, c.paceAll = 0, false
		}
		c.pace = board.PaceRequest
		c.paceGPUs |= missGPUs
		c.paceAll = c.paceAll || missAll
		if was != c.budget || wasPace != c.pace {
			c.log.WithFields(logrus.Fields{"worst": fmt.Sprintf("%.2f", worst), "budget": fmt.Sprintf("%.0f", c.budget),
				"paceDepth": c.cfg.PaceDepth}).
				Info("latency target missed: best-effort launches paced during requests, a smaller share for new best-effort contexts")
		}
	case worst < relaxBelow:
		c.calm++
		if c.calm >= relaxAfter {
			c.calm = 0
			if c.pace != board.PaceNone {
				c.pace = board.PaceNone
				c.log.WithField("worst", fmt.Sprintf("%.2f", worst)).Info("latency targets held with room: pacing off")
			} else if c.budget < c.cfg.MaxBudget && !c.moved {
				c.budget = math.Min(c.cfg.MaxBudget, c.budget+raiseStep)
				c.moved, c.trial = true, nil
			}
		}
	default:
		c.calm = 0
	}
	st.Budget, st.Pace, st.NoGainBelow = c.budget, c.pace, c.noGain
	for i := range st.Tenants {
		st.Tenants[i].NoShareGain = c.noGain > 0 && st.Tenants[i].Verdict == Missed
	}
	if c.pace != board.PaceNone {
		st.PaceDepth = uint32(c.cfg.PaceDepth)
		if !c.paceAll {
			st.PaceGPUs = c.paceGPUs
		}
	}
	// A best-effort context created while a target is on the node gets the
	// budget's share, whether or not the latency-critical tenant runs yet:
	// the share is fixed for the context's life.
	if st.Targets > 0 && beTenants > 0 {
		st.SMPercent = uint32(max(1, math.Floor(c.budget/float64(beTenants))))
	}
	if c.hold != nil {
		st.Pace, st.PaceGPUs, st.PaceDepth, st.HoldTenant = board.PaceHold, c.hold.gpus, 0, c.hold.id
		for i := range st.Tenants {
			st.Tenants[i].MeasuringAlone = st.Tenants[i].ID == c.hold.id
		}
	}
	c.out.SetControl(board.Control{SMPercent: st.SMPercent, Pace: st.Pace, PaceGPUs: st.PaceGPUs, PaceDepth: st.PaceDepth})
	c.mu.Lock()
	c.status = st
	c.mu.Unlock()
	c.writeStatus(st)
	c.saveState(hosts)
	return st
}

// stepHold ends the measurement alone in progress when its tenant has a
// solo base, is gone, or the hold ran its length, and begins one for a
// tenant in unknown when none ran for holdEvery.
func (c *Controller) stepHold(now time.Time, hosts map[bpf.TenantID]board.HostTenant, usage map[bpf.TenantID]board.Usage, unknown []bpf.TenantID) {
	if h := c.hold; h != nil {
		t := c.tenants[h.id]
		fields := logrus.Fields{"tenant": uint32(h.id), "heldFor": now.Sub(h.since).Round(time.Millisecond)}
		switch {
		case t == nil || usage[h.id].LiveProcesses == 0:
			c.log.WithFields(fields).Info("latency-critical tenant gone while measured alone: best-effort launches go again")
			c.hold = nil
		case t.solo.Count() >= c.cfg.MinRequests:
			fields["soloP99"], fields["requests"] = t.solo.Quantile(0.99), t.solo.Count()
			c.log.WithFields(fields).Info("latency-critical tenant measured alone: best-effort launches go again")
			c.hold = nil
		case h.steps >= holdSteps:
			fields["requests"] = t.solo.Count()
			c.log.WithFields(fields).Warn("latency-critical tenant not measured alone (too few requests while best-effort launches were held): tried again later")
			c.hold = nil
		}
	}
	if c.hold != nil || len(unknown) == 0 || !c.lastHold.IsZero() && now.Sub(c.lastHold) < holdEvery {
		return
	}
	id := unknown[0]
	c.hold = &hold{id: id, gpus: uint64(hosts[id].HostGPUs), since: now}
	c.lastHold = now
	c.log.WithFields(logrus.Fields{"tenant": uint32(id), "target": hosts[id].Target.String(),
		"atMost": time.Duration(holdSteps) * c.cfg.Interval}).
		Info("latency-critical tenant never seen alone: best-effort launches on its GPUs held to measure it")
}

func (c *Controller) writeStatus(st Status) {
	if c.statusFile == "" {
		return
	}
	b, err := json.Marshal(st)
	if err == nil {
		err = atomicfile.Write(c.statusFile, append(b, '\n'), 0o644)
	}
	if err != nil && err.Error() != c.fileErr {
		c.log.WithError(err).Warn("status file not written")
	}
	c.fileErr = ""
	if err != nil {
		c.fileErr = err.Error()
	}
}

// RelativeQuantiles are the percentiles a relative target is judged on:
// each against the same percentile of the tenant alone. A tenant's requests
// are seldom of one kind (a short CUDA-graph replay and a long eager pass,
// a small batch and a large one): its p99 is its longest kind's tail, and
// the short kind can be slowed several times while the p99 moves little
// (measured on the H100, docs/benchmarks.md). "At most 1.5x" holds when no
// part of the distribution is slowed more than that.
var RelativeQuantiles = []float64{0.25, 0.5, 0.75, 0.9, 0.99}

// shift is the largest ratio of a window's percentile to the same
// percentile alone, over RelativeQuantiles, and that percentile.
func shift(win, solo board.Histogram) (ratio, q float64) {
	for _, p := range RelativeQuantiles {
		a, b := win.Quantile(p), solo.Quantile(p)
		if a <= 0 || b <= 0 {
			continue
		}
		if r := float64(a) / float64(b); r > ratio {
			ratio, q = r, p
		}
	}
	return ratio, q
}

// isNotExist: no usage file yet, or one no process has initialised: an
// idle tenant, nothing to say.
func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, board.ErrUsageInvalid)
}

// StatusFileName is the controller's status file in the state dir.
const StatusFileName = "latency.json"

// StatusPath is the status file of the controller of stateDir.
func StatusPath(stateDir string) string { return filepath.Join(stateDir, StatusFileName) }

// SetStatusFile makes every Step write the status, as JSON, to path
// (atomically; root's state dir): what `gpuextctl tenants` shows of it.
func (c *Controller) SetStatusFile(path string) { c.statusFile = path }
