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
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/internal/tenantfs"
)

// FileName is the board's file name in the board directory.
const FileName = "board"

// RescanInterval is how often the publisher asks its Source for the
// tenants and looks for latency-critical tenants' files that appeared or
// were replaced; it is also the longest it waits while nothing is pending.
const RescanInterval = time.Second

// A tenant's wake FIFO wakes Run at most once per wakeGap on average, in
// bursts of at most wakeBurst: a tenant that floods it has its FIFO left
// unarmed until Run wakes for something else (its reads while its work is
// pending, or the rescan), so a flood costs the host almost nothing.
const (
	wakeGap   = 2 * time.Millisecond
	wakeBurst = 16
)

// Publisher writes the board from the latency-critical tenants' usage files.
type Publisher struct {
	acctRoot string // <stateDir>/acct: one directory per tenant
	src      Source
	log      *logrus.Entry
	board    []byte // the host's own file (the board dir is root's), mapped
	lc       map[bpf.TenantID]*lcTenant
	nextScan time.Time
	srcErr   string // the Source error last logged
	woken    bool   // Run got a wake: open usage files that were missing
	buf      [usageHeaderSize]byte
	drain    [512]byte
	reads    atomic.Uint64 // Publish calls (the benchmark reports them)
	readAt   uint64        // when a pending tenant is to be read again (MaxUint64: none)
	late     uint64        // reads of a pending tenant after its deadline, which it had extended
}

// lcTenant is a latency-critical tenant's open files.
type lcTenant struct {
	id      bpf.TenantID
	window  uint64 // ns, from the host's state
	dir     *tenantfs.Dir
	dirInfo tenantfs.Info
	usage   *tenantfs.File
	wake    *tenantfs.File // the wake FIFO: Run waits on it
	wakeTAT uint64         // its wake-ups' theoretical arrival time (GCRA, monotonic ns)
	rearmAt uint64         // 0: armed; else Run waits on it again from then on (1: at once)
	last    uint64         // the clamped deadline last read
	pending bool           // last > now when it was read: read it again until it is not
	logged  string         // the problem last logged
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

func (p *Publisher) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&p.board[off])) }

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

// Publish reads the latency-critical tenants' deadlines, each clamped to
// now + the tenant's window, and writes the latest to the board. It
// returns that deadline (CLOCK_MONOTONIC ns; 0 when none).
func (p *Publisher) Publish() uint64 { return p.publish(true) }

// publish is Publish; with all false (Run between wake-ups) it reads only
// the tenants whose work was pending when they were last read, and those
// without a wake FIFO: the others write to it when their work starts.
func (p *Publisher) publish(all bool) uint64 {
	p.reads.Add(1)
	if !time.Now().Before(p.nextScan) {
		p.scan()
		all = true
	} else if p.woken {
		for _, t := range p.lc {
			if t.usage == nil && t.dir != nil {
				p.openUsage(t)
			}
		}
		all = true
	}
	p.woken = false
	now := monotonicNow()
	var until uint64
	p.readAt = math.MaxUint64
	for _, t := range p.lc {
		if all || t.wake == nil || t.pending {
			was := t.last
			if t.wake != nil {
				t.wake.Read(p.drain[:]) // before the read: a byte from now on is news
			}
			t.last = 0
			if u, ok := p.deadline(t); ok {
				t.last = min(u, now+t.window) // a tenant's deadline never reaches past its own policy
			}
			if t.pending && was <= now && t.last > now && t.last != was {
				p.late++ // its work went on, but the board had run out before this read
			}
			// Pending: read it again before its deadline passes. Not once
			// the deadline is within a quarter window: a launch from now
			// on finds it that close and writes to the FIFO (priority.c).
			t.pending = t.last > now && (t.wake == nil || t.last-now > t.window/4)
		}
		if t.pending {
			p.readAt = min(p.readAt, t.last-uint64(readAhead)) // again before it passes
		}
		until = max(until, t.last)
	}
	if atomic.LoadUint64(p.u64(boardOffLCActiveUntil)) != until {
		atomic.StoreUint64(p.u64(boardOffLCActiveUntil), until)
		atomic.AddUint64(p.u64(boardOffSeq), 1)
	}
	return until
}

// deadline is the tenant's lc_active_until_ns, read with pread: a file the
// tenant truncated gives a short read, which is ignored.
func (p *Publisher) deadline(t *lcTenant) (uint64, bool) {
	if t.usage == nil {
		return 0, false
	}
	n, err := t.usage.ReadAt(p.buf[:], 0)
	if n < usageHeaderSize {
		if err == nil || errors.Is(err, io.EOF) {
			err = fmt.Errorf("%d of %d bytes", n, usageHeaderSize)
		}
		p.report(t, "usage file: short read (truncated?): ignored", err)
		return 0, false
	}
	if le64(p.buf[:], usageOffMagic) != usageMagic {
		return 0, false // not initialised (yet): nothing pending
	}
	return le64(p.buf[:], usageOffLCActiveUntil), true
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
// the usage file and wake FIFO of each latency-critical one.
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
		t.wake.Close()
		t.wake = nil
	}
	if t.wake == nil {
		p.openWake(t)
	}
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

// openWake opens (creating it if missing) the tenant's wake FIFO, which
// Run waits on.
func (p *Publisher) openWake(t *lcTenant) {
	if err := t.dir.Mkfifo(wakeFile, 0o666); err != nil {
		p.report(t, "wake FIFO not created: read at every wake-up", err)
		return
	}
	f, err := t.dir.OpenFIFO(wakeFile)
	if err != nil {
		p.report(t, "wake FIFO refused: read at every wake-up", err)
		return
	}
	_ = f.Chmod(0o666) // processes of one tenant may run as different users
	t.wake, t.wakeTAT, t.rearmAt = f, 0, 0
}

func (t *lcTenant) close() {
	if t.wake != nil {
		t.wake.Close()
		t.wake = nil
	}
	t.usage.Close()
	t.usage = nil
	t.dir.Close()
	t.dir = nil
}

// readAhead is how long before a pending tenant's deadline passes Run reads
// it again (its waits are timerfd-precise; this covers the wake-up
// latency). A read that finds the deadline within a quarter window is the
// last: the tenant's launches from then on write to its wake FIFO.
const readAhead = 500 * time.Microsecond

// Run publishes until ctx is done. While nothing is pending it sleeps until
// a latency-critical tenant's wake FIFO has a byte (or the rescan); while
// latency-critical work is pending it reads the pending tenants again
// readAhead before the board's deadline passes, and never sooner than
// interval after the last read. It waits in one epoll_wait on its own OS
// thread (a timerfd for the deadline, the FIFOs, an eventfd for ctx): one
// thread wakes per read, where Go's timers wake several and are late by up
// to a millisecond.
func (p *Publisher) Run(ctx context.Context, interval time.Duration) {
	w, err := newWaiter()
	if err != nil {
		p.log.WithError(err).Error("board: cannot wait on the tenants' wake FIFOs: publishing every interval")
		p.runTicker(ctx, interval)
		return
	}
	defer w.close()
	runtime.LockOSThread() // the thread sleeps in epoll_wait; the goroutine stays on it
	defer runtime.UnlockOSThread()
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
	all := true
	for ctx.Err() == nil {
		p.publish(all)
		now := monotonicNow()
		w.sync(p.lc, now)
		woken, err := w.wait(p.wakeTime(now, interval))
		if err != nil {
			p.log.WithError(err).Error("board: wait failed: publishing every interval")
			p.runTicker(ctx, interval)
			return
		}
		all = len(woken) > 0
		p.woken = all
		now = monotonicNow()
		for _, t := range woken {
			t.wakeTAT = max(t.wakeTAT, now) + uint64(wakeGap)
			if next := t.wakeTAT - wakeBurst*uint64(wakeGap); next > now {
				t.rearmAt = next // over its rate: not armed before then, and no wake-up just for it
			}
		}
	}
}

// wakeTime is when Run reads next: when the last publish asked for
// (readAt), never sooner than interval from now, at the rescan at the latest.
func (p *Publisher) wakeTime(now uint64, interval time.Duration) uint64 {
	rescan := now + uint64(max(time.Until(p.nextScan), 0))
	if p.readAt == math.MaxUint64 {
		return rescan
	}
	return min(max(p.readAt, now+uint64(interval)), rescan)
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

// waiter is Run's epoll set: a timerfd, an eventfd (ctx done) and the wake
// FIFOs, each armed one-shot.
type waiter struct {
	ep, timer, cancelFd int
	fifos               map[int32]fifo // by fd: registered FIFOs
	events              []unix.EpollEvent
}

type fifo struct {
	t *lcTenant
	f *tenantfs.File
}

func newWaiter() (*waiter, error) {
	w := &waiter{ep: -1, timer: -1, cancelFd: -1, fifos: map[int32]fifo{}, events: make([]unix.EpollEvent, 64)}
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
	return w, nil
}

func (w *waiter) close() {
	for _, fd := range []int{w.ep, w.timer, w.cancelFd} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

func (w *waiter) cancel() {
	one := [8]byte{1}
	_, _ = unix.Write(w.cancelFd, one[:])
}

// sync arms the FIFOs of the latency-critical tenants: new ones, and those
// whose wake-up wait is over. A FIFO closed since (its tenant gone, or the
// tenant replaced it) left the epoll set when it was closed.
func (w *waiter) sync(lc map[bpf.TenantID]*lcTenant, now uint64) {
	live := make(map[int32]bool, len(lc))
	for _, t := range lc {
		if t.wake == nil {
			continue
		}
		fd := int32(t.wake.Fd())
		live[fd] = true
		reg, known := w.fifos[fd]
		known = known && reg.f == t.wake // else: a closed FIFO's fd number, reused
		if known && t.rearmAt == 0 || t.rearmAt > now || known && t.pending {
			continue // armed, over its rate, or read anyway until its deadline is near
		}
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLONESHOT, Fd: fd}
		if known {
			_ = unix.EpollCtl(w.ep, unix.EPOLL_CTL_MOD, int(fd), &ev)
		} else if err := unix.EpollCtl(w.ep, unix.EPOLL_CTL_ADD, int(fd), &ev); errors.Is(err, unix.EEXIST) {
			_ = unix.EpollCtl(w.ep, unix.EPOLL_CTL_MOD, int(fd), &ev)
		}
		t.rearmAt = 0
		w.fifos[fd] = fifo{t: t, f: t.wake}
	}
	for fd := range w.fifos {
		if !live[fd] {
			delete(w.fifos, fd)
		}
	}
}

// wait sleeps until the monotonic time at, a FIFO byte or cancel. It
// returns the tenants whose FIFO woke it (drained; their FIFO is disarmed
// until sync re-arms it).
func (w *waiter) wait(at uint64) ([]*lcTenant, error) {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(max(at, 1)))}
	if err := unix.TimerfdSettime(w.timer, unix.TFD_TIMER_ABSTIME, &spec, nil); err != nil {
		return nil, fmt.Errorf("timerfd_settime: %w", err)
	}
	for {
		n, err := unix.EpollWait(w.ep, w.events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("epoll_wait: %w", err)
		}
		var woken []*lcTenant
		var buf [8]byte
		for _, ev := range w.events[:n] {
			switch ev.Fd {
			case int32(w.timer):
				_, _ = unix.Read(w.timer, buf[:])
			case int32(w.cancelFd):
				return nil, nil
			default:
				if reg, ok := w.fifos[ev.Fd]; ok && reg.t.wake == reg.f {
					var drain [512]byte
					for i := 0; i < 8; i++ { // a flood is not read to its end here
						if n, _ := reg.f.Read(drain[:]); n < len(drain) {
							break
						}
					}
					reg.t.rearmAt = 1 // disarmed (one-shot): sync re-arms it
					woken = append(woken, reg.t)
				}
			}
		}
		return woken, nil
	}
}
