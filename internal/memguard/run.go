package memguard

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/internal/gpuview"
)

// Bounds on what the guard reads of gpuext-gpuview --watch.
const (
	// MaxLine bounds one sample line.
	MaxLine = 1 << 20
	// MaxProcs bounds the processes of one sample.
	MaxProcs = 4096
	// MaxGPU bounds the GPU index a process may name.
	MaxGPU = 64
)

// DefaultInterval is how often gpuext-gpuview samples NVML for the guard.
const DefaultInterval = 500 * time.Millisecond

// ParseSample decodes one line of gpuext-gpuview --watch: one JSON object,
// no unknown field, bounded. It runs twice a second over hundreds of
// processes, so it uses encoding/json's own unknown-field check rather than
// strictjson's second pass (which also refuses duplicate keys: the line is
// the agent's own child's, not a tenant's).
func ParseSample(line []byte) (gpuview.Sample, error) {
	var s gpuview.Sample
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, err
	}
	if dec.More() {
		return s, errors.New("data after the sample")
	}
	if len(s.Procs) > MaxProcs {
		return s, fmt.Errorf("%d processes, at most %d", len(s.Procs), MaxProcs)
	}
	for i, p := range s.Procs {
		if p.GPU < 0 || p.GPU >= MaxGPU {
			return s, fmt.Errorf("process %d: gpu %d, want 0 to %d", i, p.GPU, MaxGPU-1)
		}
		if p.PID == 0 {
			return s, fmt.Errorf("process %d: pid 0", i)
		}
	}
	return s, nil
}

// PidfdKiller stops a process through a pidfd, after checking that the
// process the pidfd names is still in the tenant's cgroup: a pid reused
// since the sample is never signalled.
type PidfdKiller struct{ CgroupOf PidCgroup }

// Kill implements Killer.
func (k PidfdKiller) Kill(pid uint32, cg cgroup.ID) error {
	fd, err := unix.PidfdOpen(int(pid), 0)
	if err != nil {
		return fmt.Errorf("pidfd_open: %w", err)
	}
	defer unix.Close(fd)
	now, err := k.CgroupOf(pid)
	if err != nil {
		return err
	}
	if now != cg {
		return fmt.Errorf("pid %d is in cgroup %d now, not the tenant's %d", pid, now, cg)
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil {
		return fmt.Errorf("pidfd_send_signal: %w", err)
	}
	return nil
}

// ResolverCgroup is a PidCgroup over a cgroup.Resolver (the host's /proc).
func ResolverCgroup(res *cgroup.Resolver) PidCgroup {
	return func(pid uint32) (cgroup.ID, error) {
		c, err := res.FromPid(int(pid))
		if err != nil {
			return 0, err
		}
		return c.ID, nil
	}
}

// Config is what Run needs.
type Config struct {
	// Gpuview finds the gpuext-gpuview binary (called at each start).
	Gpuview  func() (string, error)
	Interval time.Duration
	Options  Options
	// Limits lists the tenants' limits of the moment.
	Limits func() ([]Limit, error)
	// LimitsEvery is how often Limits is called (at once when a sample has
	// a process in a cgroup the last call did not know: a new tenant); a
	// quota changed by set-policy is enforced within it. Default 5 s.
	LimitsEvery time.Duration
	CgroupOf    PidCgroup
	Killer      Killer
	// OnEvent gets every event, after the guard logged it.
	OnEvent func(Event)
	Log     *logrus.Entry
}

// Status is what the guard's metrics show.
type Status struct {
	Up         bool      // gpuext-gpuview runs and its last sample listed every GPU
	LastSample time.Time // when it was taken
	Samples    uint64
	Overruns   uint64
	Kills      uint64
	KillErrors uint64
	Err        string // why it is not up
}

// Runner runs the guard: gpuext-gpuview --watch as a child (restarted with
// a backoff when it exits), each sample through Guard.Check.
type Runner struct {
	cfg   Config
	guard *Guard

	mu sync.Mutex
	st Status
}

// NewRunner returns a runner for cfg.
func NewRunner(cfg Config) *Runner {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.LimitsEvery <= 0 {
		cfg.LimitsEvery = 5 * time.Second
	}
	return &Runner{cfg: cfg, guard: New(cfg.Options, cfg.CgroupOf, cfg.Killer)}
}

// Status returns the guard's state for metrics.
func (r *Runner) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st
}

func (r *Runner) setErr(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.st.Up = false
	r.st.Err = err.Error()
}

// Run watches until ctx ends.
func (r *Runner) Run(ctx context.Context) {
	backoff := time.Second
	lastErr := ""
	for ctx.Err() == nil {
		start := time.Now()
		err := r.runOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		r.setErr(err)
		if msg := err.Error(); msg != lastErr { // once per change of reason
			r.cfg.Log.WithError(err).Warn("GPU memory guard not watching; restarting gpuext-gpuview")
			lastErr = msg
		}
		if time.Since(start) > time.Minute {
			backoff = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// runOnce runs one gpuext-gpuview --watch until it ends or ctx does.
func (r *Runner) runOnce(ctx context.Context) error {
	bin, err := r.cfg.Gpuview()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, bin, "--watch", r.cfg.Interval.String())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr := &capped{n: 1024}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", bin, err)
	}
	r.cfg.Log.WithFields(logrus.Fields{"gpuview": bin, "interval": r.cfg.Interval.String(),
		"contextMargin": r.guard.opts.ContextMargin}).Info("GPU memory guard watching")
	rerr := r.read(stdout)
	_ = cmd.Process.Kill()
	werr := cmd.Wait()
	if rerr != nil {
		return fmt.Errorf("%s --watch: %w", bin, rerr)
	}
	return fmt.Errorf("%s --watch exited: %v: %s", bin, werr, stderr.String())
}

// read takes samples until the stream ends.
func (r *Runner) read(out io.Reader) error {
	br := bufio.NewReaderSize(out, 64<<10)
	var limits []Limit
	var known map[cgroup.ID]bool
	var at time.Time
	for {
		line, err := readLine(br, MaxLine)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		s, err := ParseSample(line)
		if err != nil {
			return fmt.Errorf("bad sample: %w", err)
		}
		now := time.Now()
		if limits == nil || now.Sub(at) >= r.cfg.LimitsEvery || r.unknown(s, known, now.Sub(at)) {
			l, err := r.cfg.Limits()
			if err != nil {
				r.cfg.Log.WithError(err).Warn("GPU memory guard: tenant limits")
			} else {
				limits, at = l, now
				known = map[cgroup.ID]bool{}
				for _, t := range l {
					for _, cg := range t.Cgroups {
						known[cg] = true
					}
				}
			}
		}
		events := r.guard.Check(now, s.Procs, limits)
		r.mu.Lock()
		r.st.Samples++
		r.st.LastSample = time.Unix(0, s.Time)
		r.st.Up, r.st.Err = s.Err == "", s.Err
		r.mu.Unlock()
		for _, ev := range events {
			r.report(ev)
		}
	}
}

// unknown says whether a sample has a process whose cgroup is new since the
// limits were read (a tenant admitted since), at most every 100 ms.
func (r *Runner) unknown(s gpuview.Sample, known map[cgroup.ID]bool, since time.Duration) bool {
	if since < 100*time.Millisecond {
		return false
	}
	for _, p := range s.Procs {
		if cg, ok := r.guard.pids[p.PID]; !ok || !known[cg] {
			return true
		}
	}
	return false
}

func (r *Runner) report(ev Event) {
	log := r.cfg.Log.WithFields(logrus.Fields{"tenant": uint64(ev.Tenant), "key": ev.Key, "policy": ev.Policy,
		"gpu": ev.GPU, "usedBytes": ev.Used, "quotaBytes": ev.Quota, "allowedBytes": ev.Allowed,
		"processes": ev.Procs, "action": string(ev.Action)})
	r.mu.Lock()
	switch {
	case ev.Err != nil:
		r.st.KillErrors++
	case ev.Victim != 0:
		r.st.Kills++
	}
	if !ev.Cooling && ev.Victim == 0 && ev.Err == nil {
		r.st.Overruns++
	}
	r.mu.Unlock()
	switch {
	case ev.Err != nil:
		log.WithError(ev.Err).Error("tenant over its GPU memory quota; could not stop the process")
	case ev.Victim != 0:
		log.WithFields(logrus.Fields{"pid": ev.Victim, "pidUsedBytes": ev.VictimUsed}).
			Warn("tenant over its GPU memory quota: process stopped (SIGKILL)")
	default:
		log.Warn("tenant over its GPU memory quota")
	}
	if r.cfg.OnEvent != nil {
		r.cfg.OnEvent(ev)
	}
}

// readLine reads one line of at most max bytes (without the newline).
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > max+1 {
			return nil, fmt.Errorf("line longer than %d bytes", max)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// capped keeps the first n bytes written to it.
type capped struct {
	mu sync.Mutex
	b  []byte
	n  int
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k := min(len(p), c.n-len(c.b)); k > 0 {
		c.b = append(c.b, p[:k]...)
	}
	return len(p), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.b)
}

// HostPIDNamespace says whether this process is in the kernel's initial
// pid namespace (one pid in the NSpid line of hostRoot's /proc/self/status):
// NVML reports host pids, and the guard signals them, so from another pid
// namespace it must not run (a pid there can name a process of the agent's
// own container). An agent in a pod needs hostPID: true.
func HostPIDNamespace(hostRoot string) error {
	status := filepath.Join(hostRoot, "proc", "self", "status")
	data, err := os.ReadFile(status)
	if err != nil {
		return fmt.Errorf("the agent's pid namespace (%s): %w", status, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f, ok := strings.CutPrefix(line, "NSpid:"); ok {
			if n := len(strings.Fields(f)); n != 1 {
				return fmt.Errorf("the agent is not in the host's pid namespace (%d nested; a pod needs hostPID: true): NVML's pids would name other processes here", n-1)
			}
			return nil
		}
	}
	return fmt.Errorf("%s has no NSpid line", status)
}
