package board

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/lib/tenantfs"
)

// FileName is the board's file name in the board directory.
const FileName = "board"

// RescanInterval is how often the publisher asks its Source for the
// tenants and looks for latency-critical tenants' files that appeared or
// were replaced; it is also the longest it waits while nothing is pending.
const RescanInterval = 250 * time.Millisecond

// A latency-critical tenant's deadline is read again window/readAheadDiv
// before it passes (readAhead), and not at all once it is nearer; within
// window/wakeAheadDiv of passing, the tenant's processes write to its wake
// FIFO when they move it (gpuext_devrt_shm.h). The difference is the room
// for the host's own lateness.
func readAhead(window uint64) uint64 { return window / readAheadDiv }

// wakesPerHalfWindow is how often a tenant's FIFO may wake Run per half
// window before it is held to that half window's end (a flood).
const wakesPerHalfWindow = 2

// Publisher writes the board from the latency-critical tenants' usage files.
type Publisher struct {
	acctRoot string // <stateDir>/acct: one directory per tenant
	src      Source
	log      *logrus.Entry
	board    []byte // the host's own file (the board dir is root's), mapped
	lc       map[bpf.TenantID]*lcTenant
	nextScan time.Time
	srcErr   string // the Source error last logged
	buf      [usageHeaderSize]byte
	drain    [512]byte
	readAt   uint64        // monotonic ns of the next read a deadline needs (MaxUint64: none)
	trace    io.Writer     // SetTrace: a line per read of a tenant (nil: none)
	reads    atomic.Uint64 // Publish calls (the benchmark reports them)
	lastNs   atomic.Int64  // wall clock of the last Publish (Unix ns), for the agent's metrics
}

// lcTenant is a latency-critical tenant's open files.
type lcTenant struct {
	id       bpf.TenantID
	window   uint64 // ns, from the host's state
	dir      *tenantfs.Dir
	dirInfo  tenantfs.Info
	usage    *tenantfs.File
	wake     *tenantfs.File // the wake FIFO, nil when there is none Run may wait on
	woke     bool           // its FIFO had a byte since the last read
	armed    bool           // its FIFO is in Run's epoll set, armed (one-shot)
	added    bool           // its FIFO (this open of it) was added to the epoll set
	hold     uint64         // monotonic ns: its FIFO is not armed again before then (a flood)
	burstEnd uint64         // monotonic ns: the end of the quarter window its wakes are counted in
	burst    int            // its FIFO's wakes in that quarter
	readAt   uint64         // monotonic ns: its deadline is to be read again then (MaxUint64: when it wakes Run)
	last     uint64         // the clamped deadline last read
	busy     uint64         // the expected end of its request last read, clamped to last
	logged   string         // the problem last logged
}

// Open maps (creating it if needed) boardDir/board and prepares to read
// the usage files under acctRoot of the tenants src calls latency-critical.
// log receives one line per problem with a tenant's files (nil: logrus's
// standard logger).
func Open(boardDir, acctRoot string, src Source, log *logrus.Entry) (*Publisher, error) {
	if src == nil {
		return nil, errors.New("board: no source of the host's tenants")
	}
	if log == nil {
		log = logrus.NewEntry(logrus.StandardLogger())
	}
	if err := os.MkdirAll(boardDir, 0o755); err != nil {
		return nil, fmt.Errorf("board dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(boardDir, FileName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("board: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(boardSize); err != nil {
		return nil, fmt.Errorf("board: %w", err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, boardSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map board: %w", err)
	}
	p := &Publisher{acctRoot: acctRoot, src: src, log: log.WithField("component", "board"), board: mem,
		lc: map[bpf.TenantID]*lcTenant{}}
	*(*uint32)(unsafe.Pointer(&mem[boardOffVersion])) = shmVersion
	*(*uint32)(unsafe.Pointer(&mem[boardOffSize])) = boardSize
	atomic.StoreUint64(p.u64(boardOffMagic), boardMagic) // last: readers check it first
	return p, nil
}

func (p *Publisher) readsSoFar() uint64 { return p.reads.Load() }

// Publishes is how many times the publisher has read the tenants and
// written the board; LastPublish is when it last did (zero before the
// first). Both are safe to call from any goroutine (the agent's metrics).
func (p *Publisher) Publishes() uint64 { return p.reads.Load() }

// LastPublish: see Publishes.
func (p *Publisher) LastPublish() time.Time {
	if ns := p.lastNs.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

func (p *Publisher) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&p.board[off])) }
func (p *Publisher) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&p.board[off])) }

// Close closes the tenants' files and unmaps the board; the board file stays.
func (p *Publisher) Close() {
	for id, t := range p.lc {
		t.close()
		delete(p.lc, id)
	}
	if p.board != nil {
		_ = unix.Munmap(p.board)
		p.board = nil
	}
}

// Board is what the board says now: the deadline and the update count.
func (p *Publisher) Board() (until, seq uint64) {
	return atomic.LoadUint64(p.u64(boardOffLCActiveUntil)), atomic.LoadUint64(p.u64(boardOffSeq))
}

// SetTrace makes the publisher write one line to w for every read of a
// latency-critical tenant's deadline: "NOW TENANT WHY DEADLINE PUBLISHED
// BUSY" (CLOCK_MONOTONIC ns; WHY is f for its wake FIFO, t for a read due
// before its deadline, s for a rescan or Publish; DEADLINE is what the
// tenant wrote, PUBLISHED what the host took from it after the clamp, 0 when
// nothing is pending, BUSY its request's expected end as published). For diagnosing the launch gate (gpuextctl board --trace); nil
// stops it. Not safe to call while Run runs.
func (p *Publisher) SetTrace(w io.Writer) { p.trace = w }

// Publish reads the latency-critical tenants' deadlines, each clamped to
// now + the tenant's window, and writes the latest to the board. It
// returns that deadline (CLOCK_MONOTONIC ns; 0 when none).
func (p *Publisher) Publish() uint64 { return p.publish(true) }

// publish is Publish; with all false (Run) it reads only the tenants it has
// to: those whose FIFO woke Run and those whose deadline is due to be read
// again (all of them at a rescan).
func (p *Publisher) publish(all bool) uint64 {
	p.reads.Add(1)
	wall := time.Now()
	defer p.lastNs.Store(wall.UnixNano())
	if !wall.Before(p.nextScan) {
		p.scan()
		all = true
	}
	now := monotonicNow()
	var until, busy uint64
	p.readAt = math.MaxUint64
	// While the latency controller paces best-effort launches, they wait on
	// each request's expected end, which a latency-critical process writes
	// silently at the request's start: read every tenant every interval.
	poll := atomic.LoadUint32(p.u32(boardOffBEPace)) == paceRequest
	for _, t := range p.lc {
		if !all && !poll && !t.woke && t.readAt > now {
			until, busy = max(until, t.last), max(busy, t.busy)
			p.readAt = min(p.readAt, t.readAt)
			continue
		}
		if t.wake != nil && (t.woke || all) { // a byte left there by now wakes Run again: one more read, no loss
			for i := 0; i < 8; i++ { // before the read: a byte from now on is news (a flood is not read to its end)
				if n, _ := t.wake.Read(p.drain[:]); n < len(p.drain) {
					break
				}
			}
		}
		if t.woke && t.usage == nil && t.dir != nil {
			p.openUsage(t) // a process of a tenant found at the last scan has started
		}
		why := byte('t') // its deadline was due to be read again
		switch {
		case t.woke:
			why = 'f' // its FIFO
		case all:
			why = 's' // a rescan, or Publish
		}
		t.woke = false
		t.last, t.busy = 0, 0
		u, b, ok := p.deadline(t)
		if ok {
			t.last = min(u, now+t.window) // a tenant's deadline never reaches past its own policy
			t.busy = min(b, t.last)       // nor its request's expected end
			if t.busy+t.window < t.last {
				t.busy = 0 // the deadline moved on without a request: its work marks none (no waits)
			}
		}
		if p.trace != nil {
			fmt.Fprintf(p.trace, "%d %d %c %d %d %d\n", now, t.id, why, u, t.last, t.busy)
		}
		until, busy = max(until, t.last), max(busy, t.busy)
		// Read it again readAhead before its deadline passes, unless every
		// move of it from now on reaches the FIFO: the deadline its
		// processes compare with is the one read (not clamped) and is
		// already within the FIFO's reach (wakeAheadDiv) of now.
		t.readAt = math.MaxUint64
		if ahead := readAhead(t.window); t.last > now+ahead && (u != t.last || t.last > now+t.window/wakeAheadDiv) {
			t.readAt = t.last - ahead
		}
		p.readAt = min(p.readAt, t.readAt)
	}
	if poll && len(p.lc) > 0 {
		p.readAt = now // Run waits its interval, then reads again
	}
	if atomic.LoadUint64(p.u64(boardOffLCActiveUntil)) != until || atomic.LoadUint64(p.u64(boardOffLCBusyUntil)) != busy {
		atomic.StoreUint64(p.u64(boardOffLCBusyUntil), busy)
		atomic.StoreUint64(p.u64(boardOffLCActiveUntil), until)
		atomic.AddUint64(p.u64(boardOffSeq), 1)
	}
	return until
}

// deadline is the tenant's lc_active_until_ns and lc_busy_until_ns, read
// with pread: a file the tenant truncated gives a short read, which is
// ignored.
func (p *Publisher) deadline(t *lcTenant) (until, busy uint64, ok bool) {
	if t.usage == nil {
		return 0, 0, false
	}
	n, err := t.usage.ReadAt(p.buf[:], 0)
	if n < usageHeaderSize {
		if err == nil || errors.Is(err, io.EOF) {
			err = fmt.Errorf("%d of %d bytes", n, usageHeaderSize)
		}
		p.report(t, "usage file: short read (truncated?): ignored", err)
		return 0, 0, false
	}
	if le64(p.buf[:], usageOffMagic) != usageMagic {
		return 0, 0, false // not initialised (yet): nothing pending
	}
	return le64(p.buf[:], usageOffLCActiveUntil), le64(p.buf[:], usageOffLCBusyUntil), true
}

func le64(b []byte, off int) uint64 { return *(*uint64)(unsafe.Pointer(&b[off])) }

func monotonicNow() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // the clock of the device runtime's gx_now_ns
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

// report logs a problem with a tenant's files once (until another one):
// problem is the same words each time, err says what this time was.
func (p *Publisher) report(t *lcTenant, problem string, err error) {
	if t.logged == problem {
		return
	}
	t.logged = problem
	e := p.log.WithFields(logrus.Fields{"tenant": t.id, "acctDir": filepath.Join(p.acctRoot, t.name())})
	if err != nil {
		e = e.WithError(err)
	}
	e.Warn(problem)
}

func (t *lcTenant) name() string { return strconv.FormatUint(uint64(t.id), 10) }

// scan asks the Source for the tenants, forgets those no longer
// latency-critical, and opens (or reopens, when the tenant replaced them)
// the usage file of each latency-critical one.
func (p *Publisher) scan() {
	p.nextScan = time.Now().Add(RescanInterval)
	host, err := p.src.Tenants()
	if err != nil {
		if err.Error() != p.srcErr {
			p.srcErr = err.Error()
			p.log.WithError(err).Warn("host tenant state unreadable: keeping the last one")
		}
		return
	}
	p.srcErr = ""
	for id, t := range p.lc {
		if h, ok := host[id]; !ok || h.Class != tenantcfg.ClassLatencyCritical {
			t.close()
			delete(p.lc, id)
		}
	}
	root, err := tenantfs.OpenDir(p.acctRoot, "")
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) && err.Error() != p.srcErr {
			p.srcErr = err.Error()
			p.log.WithError(err).Warn("acct dir unreadable")
		}
		return
	}
	defer root.Close()
	for id, h := range host {
		if h.Class != tenantcfg.ClassLatencyCritical {
			continue // never read: a tenant that is not latency-critical cannot hold others back
		}
		t := p.lc[id]
		if t == nil {
			t = &lcTenant{id: id}
			p.lc[id] = t
		}
		t.window = uint64(h.Window.Nanoseconds())
		p.refresh(root, t)
	}
}

func (p *Publisher) refresh(root *tenantfs.Dir, t *lcTenant) {
	in, err := root.Lstat(t.name())
	if t.dir != nil && (err != nil || in.Dev != t.dirInfo.Dev || in.Ino != t.dirInfo.Ino) {
		t.close() // acct dir gone or made anew
	}
	if err != nil {
		return // no acct dir (yet)
	}
	if t.dir == nil {
		d, err := root.OpenDir(t.name())
		if err != nil {
			p.report(t, "acct dir refused: ignored", err)
			return
		}
		t.dir, t.dirInfo = d, in
	}
	if t.usage != nil && !t.dir.Same(usageFile, t.usage) {
		t.usage.Close()
		t.usage = nil
	}
	if t.usage == nil {
		p.openUsage(t)
	}
	if t.wake != nil && !t.dir.Same(wakeFile, t.wake) {
		t.closeWake()
	}
	if t.wake == nil {
		p.openWake(t)
	}
}

// openWake opens the tenant's wake FIFO, creating it if missing (its
// processes may have been first). Without one (the tenant put something
// else there) the tenant's starts are seen at the next rescan.
func (p *Publisher) openWake(t *lcTenant) {
	if err := t.dir.Mkfifo(wakeFile, 0o666); err != nil {
		p.report(t, "wake FIFO not created: its starts are seen at the rescan", err)
		return
	}
	f, err := t.dir.OpenFIFO(wakeFile)
	if err != nil {
		p.report(t, "wake FIFO refused: its starts are seen at the rescan", err)
		return
	}
	_ = f.Chmod(0o666) // the tenant's processes may run as different users
	t.wake, t.armed, t.added, t.hold = f, false, false, 0
}

func (t *lcTenant) closeWake() {
	t.wake.Close() // closing the fd takes it out of Run's epoll set
	t.wake, t.armed, t.added = nil, false, false
}

func (p *Publisher) openUsage(t *lcTenant) {
	f, err := t.dir.Open(usageFile, usageSize)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return // no CUDA process in that tenant yet
	case err != nil:
		p.report(t, "usage file refused: ignored", err)
		return
	}
	t.usage = f
}

func (t *lcTenant) close() {
	if t.wake != nil {
		t.closeWake()
	}
	t.usage.Close()
	t.usage = nil
	t.dir.Close()
	t.dir = nil
}

// Run publishes until ctx is done, reading the latency-critical tenants'
// deadlines only when the board may change: when a tenant's wake FIFO has a
// byte (its work started, or went on when its deadline was near), a quarter
// window before the latest deadline read passes (an extension its processes
// made silently; not when every later move reaches the FIFO), and at each
// rescan. It never reads sooner than interval after the last read, and hears
// a tenant that floods its FIFO at most twice per half window. It waits on
// one epoll set (a timerfd, the FIFOs, an eventfd for ctx) through Go's own
// poller; where epoll is not to be had it reads every interval.
//
// History (the H200's gpu-test priority, gate mode, window 6 ms, a request
// every 5.2 ms): a 1 kHz reader held the latency-critical p99 at 0.28 ms for
// 5% of a core, but only because its board lapsed 0.8 ms after every request
// began and best-effort kernels started there; exact event-driven readers
// let best-effort launches go only when their longest delay ran out, at
// random moments, and the p99 fell to 0.5-6 ms. With the device runtime's
// window counted from a wait's return and a starved launch sent just after a
// request (priority.c), this reader holds 0.28-0.30 ms for 1% of a core
// (TestGateHoldsBestEffortWhileLCActive, TestStarvedBestEffortGoesAfterARequest).
func (p *Publisher) Run(ctx context.Context, interval time.Duration) {
	w, err := newWaiter()
	if err != nil {
		p.log.WithError(err).Error("board: cannot wait on the tenants' wake FIFOs: publishing every interval")
		p.runTicker(ctx, interval)
		return
	}
	defer w.close()
	for _, t := range p.lc {
		t.armed, t.added = false, false // a new epoll set: none is in it
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-ctx.Done():
			w.cancel()
		case <-stop:
		}
	}()
	defer wg.Wait()
	defer close(stop)
	for all := true; ctx.Err() == nil; all = false {
		p.publish(all)
		now := monotonicNow()
		w.arm(p.lc, now)
		woken, err := w.wait(p.wakeTime(now, interval))
		if err != nil {
			p.log.WithError(err).Error("board: wait failed: publishing every interval")
			p.runTicker(ctx, interval)
			return
		}
		now = monotonicNow()
		for _, t := range woken {
			t.woke = true
			// A tenant's processes write to its FIFO at most once per half
			// window (gpuext_devrt_shm.h): a FIFO that wakes Run more often
			// than twice in one is a flood, held until that half window ends
			// (Run wakes once then to arm it again).
			if now >= t.burstEnd {
				t.burstEnd, t.burst = now+max(uint64(interval), t.window/wakeAheadDiv), 0
			}
			if t.burst++; t.burst >= wakesPerHalfWindow {
				t.hold = t.burstEnd
			}
		}
	}
}

// wakeTime is when Run reads next: the deadline read it needs (never
// sooner than interval from now), a held FIFO's arming, the rescan.
func (p *Publisher) wakeTime(now uint64, interval time.Duration) uint64 {
	at := now + uint64(max(time.Until(p.nextScan), 0))
	if p.readAt != math.MaxUint64 {
		at = min(at, max(p.readAt, now+uint64(interval)))
	}
	for _, t := range p.lc {
		if t.wake != nil && !t.armed && t.hold > now {
			at = min(at, t.hold) // a flood's FIFO armed again
		}
	}
	return at
}

// runTicker is Run without epoll: a read every interval.
func (p *Publisher) runTicker(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.Publish()
		}
	}
}

// waiter is Run's epoll set: a timerfd, an eventfd (ctx done) and the
// tenants' wake FIFOs, each armed one-shot.
type waiter struct {
	ep, timer, cancelFd int
	epf                 *os.File            // ep, in Go's poller: readable when an event is ready
	epc                 syscall.RawConn     // epf's, to wait on it
	fifos               map[int32]*lcTenant // by fd: the FIFOs armed
	events              []unix.EpollEvent
}

func newWaiter() (*waiter, error) {
	w := &waiter{ep: -1, timer: -1, cancelFd: -1, fifos: map[int32]*lcTenant{}, events: make([]unix.EpollEvent, 64)}
	var err error
	if w.ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	if w.timer, err = unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC|unix.TFD_NONBLOCK); err != nil {
		w.close()
		return nil, fmt.Errorf("timerfd_create: %w", err)
	}
	if w.cancelFd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		w.close()
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	for _, fd := range []int{w.timer, w.cancelFd} {
		if err := unix.EpollCtl(w.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			w.close()
			return nil, fmt.Errorf("epoll_ctl: %w", err)
		}
	}
	if err := unix.SetNonblock(w.ep, true); err != nil { // os.NewFile puts a non-blocking fd in the poller
		w.close()
		return nil, fmt.Errorf("epoll fd: %w", err)
	}
	w.epf = os.NewFile(uintptr(w.ep), "epoll")
	if w.epc, err = w.epf.SyscallConn(); err != nil {
		w.close()
		return nil, fmt.Errorf("epoll fd: %w", err)
	}
	return w, nil
}

func (w *waiter) close() {
	if w.epf != nil {
		w.epf.Close()
		w.ep = -1
	}
	for _, fd := range []int{w.ep, w.timer, w.cancelFd} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

func (w *waiter) cancel() {
	one := [8]byte{0: 1}
	_, _ = unix.Write(w.cancelFd, one[:])
}

// arm arms the FIFOs of the latency-critical tenants that are not armed
// and not held back (a flood), and forgets those closed since (closing an
// fd takes it out of the epoll set).
func (w *waiter) arm(lc map[bpf.TenantID]*lcTenant, now uint64) {
	clear(w.fifos)
	for _, t := range lc {
		if t.wake == nil {
			continue
		}
		fd := int32(t.wake.Fd())
		if !t.armed && t.hold <= now {
			ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT, Fd: fd}
			op := unix.EPOLL_CTL_MOD
			if !t.added {
				op = unix.EPOLL_CTL_ADD
			}
			err := unix.EpollCtl(w.ep, op, int(fd), &ev)
			if errors.Is(err, unix.EEXIST) {
				err = unix.EpollCtl(w.ep, unix.EPOLL_CTL_MOD, int(fd), &ev)
			}
			t.added, t.armed = t.added || err == nil, err == nil
		}
		if t.armed {
			w.fifos[fd] = t
		}
	}
}

// wait sleeps until the monotonic time at, a FIFO byte or cancel. It
// returns the tenants whose FIFO woke it (disarmed until arm; Publish
// drains them).
func (w *waiter) wait(at uint64) ([]*lcTenant, error) {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(max(at, 1)))}
	if err := unix.TimerfdSettime(w.timer, unix.TFD_TIMER_ABSTIME, &spec, nil); err != nil {
		return nil, fmt.Errorf("timerfd_settime: %w", err)
	}
	var woken []*lcTenant
	var werr error
	err := w.epc.Read(func(fd uintptr) bool {
		n, err := unix.EpollWait(int(fd), w.events, 0)
		if errors.Is(err, unix.EINTR) || err == nil && n == 0 {
			return false // nothing ready: the goroutine waits in Go's poller
		}
		if err != nil {
			werr = fmt.Errorf("epoll_wait: %w", err)
			return true
		}
		var buf [8]byte
		for _, ev := range w.events[:n] {
			switch ev.Fd {
			case int32(w.timer):
				_, _ = unix.Read(w.timer, buf[:])
			case int32(w.cancelFd):
				woken = nil
				return true
			default:
				if t, ok := w.fifos[ev.Fd]; ok {
					t.armed = false // one-shot
					woken = append(woken, t)
				}
			}
		}
		return true
	})
	if err == nil {
		err = werr
	}
	return woken, err
}
