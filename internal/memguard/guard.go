// Package memguard holds a tenant's GPU memory quota without the tenant's
// cooperation: it reads the driver's own per-process figure (NVML, through
// gpuext-gpuview --watch), maps each process to its tenant by cgroup, and
// stops the process that pushed a tenant over its quota (SIGKILL, as the
// kernel's OOM killer does for memory), or only reports it, as the policy
// says. The device runtime's quota is the fast path that frameworks handle
// gracefully; this is what holds when a process unsets LD_PRELOAD, is
// static, or loads its own copy of libcuda (docs/configuration.md, "What holds the quota").
package memguard

import (
	"fmt"
	"sort"
	"time"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/internal/gpuview"
)

// Action is what the guard does when a tenant's processes hold more device
// memory on a GPU than its quota plus the context margin.
type Action string

const (
	// ActionKill stops the process that pushed the tenant over (SIGKILL).
	ActionKill Action = "kill"
	// ActionReport logs the overrun and counts it; nothing is stopped.
	ActionReport Action = "report"
	// ActionOff turns the guard off.
	ActionOff Action = "off"
)

// ParseAction accepts kill, report and off; "" is kill.
func ParseAction(s string) (Action, error) {
	switch Action(s) {
	case "", ActionKill:
		return ActionKill, nil
	case ActionReport, ActionOff:
		return Action(s), nil
	}
	return "", fmt.Errorf("action %q: want %q, %q or %q", s, ActionKill, ActionReport, ActionOff)
}

// Limit is one tenant's device-memory quota as the guard enforces it.
type Limit struct {
	Tenant  bpf.TenantID
	Key     string
	Policy  string
	Cgroups []cgroup.ID
	// Quota applies on each GPU on its own when GPUs is nil; 0: no quota.
	Quota uint64
	// GPUs: for a container given GPU memory by the scheduler, the quota on
	// each host GPU index it was given (0: no quota there, as the device
	// runtime reads it); a GPU it was not given allows only the margin.
	GPUs   map[int]uint64
	Action Action
}

// quotaOn is the tenant's quota on host GPU gpu and whether it has one.
func (l Limit) quotaOn(gpu int) (uint64, bool) {
	if l.GPUs != nil {
		q, given := l.GPUs[gpu]
		return q, !given || q > 0
	}
	return l.Quota, l.Quota > 0
}

// Options tune the guard.
type Options struct {
	// ContextMargin is the device memory a process may hold beyond what its
	// allocations count: the driver's own context, module images and
	// reserved pools, which NVML counts and the quota does not (measured:
	// docs/configuration.md, "What holds the quota"). The limit on a GPU is the quota plus one margin
	// per process of the tenant there.
	ContextMargin uint64
	// Cooldown is how long after a kill the guard waits for the driver to
	// free the process's memory before it stops another process of the
	// same tenant on that GPU (sooner when the process leaves the list).
	Cooldown time.Duration
	// BeforeKill, when set, is called with the event of a kill just before
	// the signal: the reason is in the container's termination message
	// before the runtime can see the process exit.
	BeforeKill func(Event)
}

// DefaultContextMargin is Options.ContextMargin when the config sets none.
const DefaultContextMargin = 1 << 30

// DefaultCooldown is Options.Cooldown when the config sets none.
const DefaultCooldown = 3 * time.Second

// Event is one thing the guard saw or did on one sample.
type Event struct {
	Tenant  bpf.TenantID
	Key     string
	Policy  string
	GPU     int
	Used    uint64 // NVML bytes of the tenant's processes on the GPU
	Quota   uint64
	Allowed uint64 // Quota + ContextMargin per process
	Procs   int
	// Victim is the process stopped (0: none: report only, cooling down
	// after the last kill, or the kill failed).
	Victim       uint32
	VictimUsed   uint64
	VictimCgroup cgroup.ID
	Action       Action
	// Cooling: a kill on this tenant and GPU waits for the last one.
	Cooling bool
	Err     error
}

// Killer stops a process if it is still in cgroup cg.
type Killer interface {
	Kill(pid uint32, cg cgroup.ID) error
}

// PidCgroup resolves a process's cgroup v2 id.
type PidCgroup func(pid uint32) (cgroup.ID, error)

// Guard decides, sample after sample. It is not safe for concurrent use.
type Guard struct {
	opts   Options
	cgOf   PidCgroup
	killer Killer

	pids map[uint32]cgroup.ID // cache: pid -> cgroup, kept while the pid is listed
	prev map[procKey]uint64   // last sample's bytes per (pid, gpu)
	// cooling: (tenant, gpu) -> the kill's deadline and victim
	cooling map[tgKey]cool
	over    map[tgKey]bool // over the limit at the last sample (for episodes)
}

type procKey struct {
	pid uint32
	gpu int
}

type tgKey struct {
	t   bpf.TenantID
	gpu int
}

type cool struct {
	until  time.Time
	victim uint32
}

// New returns a guard resolving pids with cgOf and stopping them with k.
func New(opts Options, cgOf PidCgroup, k Killer) *Guard {
	if opts.ContextMargin == 0 {
		opts.ContextMargin = DefaultContextMargin
	}
	if opts.Cooldown <= 0 {
		opts.Cooldown = DefaultCooldown
	}
	return &Guard{opts: opts, cgOf: cgOf, killer: k, pids: map[uint32]cgroup.ID{},
		prev: map[procKey]uint64{}, cooling: map[tgKey]cool{}, over: map[tgKey]bool{}}
}

// tproc is one process of a tenant on a GPU in this sample.
type tproc struct {
	pid   uint32
	cg    cgroup.ID
	used  uint64
	delta int64 // growth since the last sample (a new process: all of it)
}

// Check takes one sample and the tenants' limits of the moment and returns
// the overruns (one Event per tenant and GPU over its limit), killing
// where the tenant's action says so. Processes in no tenant are never
// touched; a pid that left the list is forgotten.
func (g *Guard) Check(now time.Time, procs []gpuview.SampleProc, limits []Limit) []Event {
	owner := make(map[cgroup.ID]int, len(limits))
	for i, l := range limits {
		for _, cg := range l.Cgroups {
			owner[cg] = i
		}
	}
	seen := make(map[uint32]bool, len(procs))
	groups := map[tgKey][]tproc{}
	cur := make(map[procKey]uint64, len(procs))
	for _, p := range procs {
		seen[p.PID] = true
		cg, ok := g.pids[p.PID]
		if !ok {
			c, err := g.cgOf(p.PID)
			if err != nil {
				continue // gone since, or unreadable: not a tenant's this time
			}
			cg, g.pids[p.PID] = c, c
		}
		i, ok := owner[cg]
		if !ok {
			continue
		}
		k := procKey{p.PID, p.GPU}
		cur[k] += p.UsedBytes
		prev, had := g.prev[k]
		delta := int64(p.UsedBytes)
		if had {
			delta = int64(p.UsedBytes) - int64(prev)
		}
		tk := tgKey{limits[i].Tenant, p.GPU}
		groups[tk] = append(groups[tk], tproc{pid: p.PID, cg: cg, used: p.UsedBytes, delta: delta})
	}
	for pid := range g.pids {
		if !seen[pid] {
			delete(g.pids, pid)
		}
	}
	g.prev = cur

	byTenant := make(map[bpf.TenantID]int, len(limits))
	for i, l := range limits {
		byTenant[l.Tenant] = i
	}
	var events []Event
	over := map[tgKey]bool{}
	keys := make([]tgKey, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool {
		if keys[a].t != keys[b].t {
			return keys[a].t < keys[b].t
		}
		return keys[a].gpu < keys[b].gpu
	})
	for _, k := range keys {
		l := limits[byTenant[k.t]]
		quota, has := l.quotaOn(k.gpu)
		if !has || l.Action == ActionOff {
			continue
		}
		ps := groups[k]
		var used uint64
		for _, p := range ps {
			used += p.used
		}
		allowed := quota + g.opts.ContextMargin*uint64(len(ps))
		if used <= allowed {
			continue
		}
		over[k] = true
		ev := Event{Tenant: l.Tenant, Key: l.Key, Policy: l.Policy, GPU: k.gpu, Used: used, Quota: quota,
			Allowed: allowed, Procs: len(ps), Action: l.Action}
		if l.Action == ActionKill {
			if c, ok := g.cooling[k]; ok && now.Before(c.until) && seen[c.victim] {
				ev.Cooling = true
			} else {
				v := victim(ps)
				ev.Victim, ev.VictimUsed, ev.VictimCgroup = v.pid, v.used, v.cg
				if g.opts.BeforeKill != nil {
					g.opts.BeforeKill(ev)
				}
				if err := g.killer.Kill(v.pid, v.cg); err != nil {
					ev.Victim, ev.Err = 0, fmt.Errorf("stop pid %d: %w", v.pid, err)
				} else {
					g.cooling[k] = cool{until: now.Add(g.opts.Cooldown), victim: v.pid}
				}
			}
		}
		if ev.Victim != 0 || ev.Err != nil || !g.over[k] {
			events = append(events, ev) // a kill, a failure, or a new overrun: said once
		}
	}
	for k := range g.cooling {
		if !over[k] {
			delete(g.cooling, k)
		}
	}
	g.over = over
	return events
}

// victim is the process that pushed the tenant over: the one that grew
// most since the last sample, the largest on a tie.
func victim(ps []tproc) tproc {
	best := ps[0]
	for _, p := range ps[1:] {
		if p.delta > best.delta || (p.delta == best.delta && p.used > best.used) {
			best = p
		}
	}
	return best
}
