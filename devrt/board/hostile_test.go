package board

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/gpuext/gpuext/lib/tenantfs"
)

// Tests of the publisher and ReadUsage against usage files a tenant made
// hostile: a forged class and deadline, a truncation under the reader, a
// link to a host file, a FIFO, a huge file.

// usageBytes is a usage file as the interposer lays it out, with a forged
// class and deadline.
func usageBytes(class uint32, until uint64) []byte {
	b := make([]byte, usageSize)
	binary.LittleEndian.PutUint64(b[usageOffMagic:], usageMagic)
	binary.LittleEndian.PutUint32(b[usageOffClass:], class)
	binary.LittleEndian.PutUint64(b[usageOffLCActiveUntil:], until)
	return b
}

func writeUsage(t testing.TB, tn tenant, b []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(tn.acct, usageFile), b, 0o666); err != nil {
		t.Fatal(err)
	}
}

// publishFresh rescans, then publishes.
func publishFresh(p *Publisher) uint64 {
	p.nextScan = time.Time{}
	return p.Publish()
}

// A best-effort (or standard) tenant that writes latency-critical and a
// deadline of 2^64-1 about itself holds nobody back: its file is not read.
func TestForgedClassIgnored(t *testing.T) {
	state := t.TempDir()
	be := newTenant(t, state, 1, "best-effort", 0)
	std := newTenant(t, state, 2, "standard", 0)
	writeUsage(t, be, usageBytes(classLatencyCritical, math.MaxUint64))
	writeUsage(t, std, usageBytes(classLatencyCritical, math.MaxUint64))
	pub := openPublisher(t, state)
	if until := publishFresh(pub); until != 0 {
		t.Fatalf("board shows %d from tenants the host calls best-effort and standard", until)
	}
	if len(pub.lc) != 0 {
		t.Errorf("publisher holds %d tenants' files open; none is latency-critical", len(pub.lc))
	}
}

// A latency-critical tenant's deadline is clamped to now + its window: at
// most its own policy, whatever it writes.
func TestDeadlineClampedToWindow(t *testing.T) {
	state := t.TempDir()
	lc := newTenant(t, state, 1, "latency-critical", 6000)
	writeUsage(t, lc, usageBytes(0, math.MaxUint64)) // the class it writes is not read either
	pub := openPublisher(t, state)
	before := monotonicNow()
	until := publishFresh(pub)
	after := monotonicNow()
	if until <= before || until > after+6_000_000 {
		t.Fatalf("board %d, want in (%d, %d]: the deadline clamped to now + 6ms", until, before, after+6_000_000)
	}
	// An honest deadline inside the window is taken as it is.
	honest := monotonicNow() + 3_000_000
	writeUsage(t, lc, usageBytes(0, honest))
	if got := publishFresh(pub); got != honest {
		t.Errorf("honest deadline %d published as %d", honest, got)
	}
}

// A latency-critical request's expected end (lc_busy_until_ns) reaches the
// board only as far as the tenant's own published deadline, and not at all
// when the deadline moved on more than a window past it (work that never
// waits for the GPU marks no requests: a best-effort launch must not wait
// for a request end that will not come).
func TestBusyUntilClampedAndDropped(t *testing.T) {
	state := t.TempDir()
	lc := newTenant(t, state, 1, "latency-critical", 40000) // 40 ms window
	pub := openPublisher(t, state)
	busyOnBoard := func() uint64 { return atomic.LoadUint64(pub.u64(boardOffLCBusyUntil)) }
	write := func(until, busy uint64) {
		b := usageBytes(0, until)
		binary.LittleEndian.PutUint64(b[usageOffLCBusyUntil:], busy)
		writeUsage(t, lc, b)
	}
	now := monotonicNow()
	for _, c := range []struct {
		name        string
		until, busy uint64
		want        func(until uint64) uint64
	}{
		{"a request in progress", now + 30_000_000, now + 2_000_000, func(uint64) uint64 { return now + 2_000_000 }},
		{"past its own deadline", now + 30_000_000, now + 35_000_000, func(u uint64) uint64 { return u }},
		{"forged far ahead", now + 30_000_000, math.MaxUint64, func(u uint64) uint64 { return u }},
		{"no request for over a window", now + 30_000_000, now - 20_000_000, func(uint64) uint64 { return 0 }},
	} {
		write(c.until, c.busy)
		until := publishFresh(pub)
		if got, want := busyOnBoard(), c.want(until); got != want {
			t.Errorf("%s: board busy-until %d, want %d (deadline %d)", c.name, got, want, until)
		}
	}
}

// The tenant truncates its usage file (and restores it) over and over while
// the publisher runs many Publish cycles: the publisher keeps running (no
// SIGBUS: nothing is mapped), the board does not move, and the short read is
// logged once.
func TestTruncatedUsageDoesNotCrash(t *testing.T) {
	state := t.TempDir()
	lc := newTenant(t, state, 1, "latency-critical", 6000)
	path := filepath.Join(lc.acct, usageFile)
	writeUsage(t, lc, usageBytes(0, 0)) // nothing pending
	logger, hook := test.NewNullLogger()
	pub, err := Open(filepath.Join(state, "board"), filepath.Join(state, "acct"), TenantSettings(filepath.Join(state, "tenants")), logrus.NewEntry(logger))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	pub.Publish()
	if pub.lc[1] == nil || pub.lc[1].usage == nil {
		t.Fatal("the publisher did not open the latency-critical tenant's usage file")
	}
	until0, seq0 := pub.Board()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the tenant
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			size := int64(0)
			if i%2 == 1 {
				size = usageSize
			}
			if err := os.Truncate(path, size); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := 0; i < 20000; i++ {
		pub.Publish()
	}
	close(stop)
	wg.Wait()
	os.Truncate(path, 0)
	pub.Publish()
	if until, seq := pub.Board(); until != until0 || seq != seq0 {
		t.Errorf("board moved: until %d seq %d, was %d %d", until, seq, until0, seq0)
	}
	short := 0
	for _, e := range hook.AllEntries() {
		if strings.Contains(e.Message, "short read") {
			short++
			if e.Data["tenant"] == nil || e.Data["acctDir"] == nil {
				t.Errorf("log line without tenant fields: %v", e.Data)
			}
		}
	}
	if short != 1 {
		t.Errorf("short read logged %d times, want once", short)
	}
}

// secretUsage is a host file (0600, root's) that looks like a usage file
// with work pending forever.
func secretUsage(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, usageBytes(classLatencyCritical, math.MaxUint64), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A usage file that is a link to a host file is refused, by the publisher
// and by ReadUsage (the CLI's tenant view): nothing of it is read.
func TestSymlinkedUsageRefused(t *testing.T) {
	state := t.TempDir()
	lc := newTenant(t, state, 1, "latency-critical", 6000)
	if err := os.Symlink(secretUsage(t), filepath.Join(lc.acct, usageFile)); err != nil {
		t.Fatal(err)
	}
	pub := openPublisher(t, state)
	if until := publishFresh(pub); until != 0 {
		t.Errorf("board %d from a link to a host file", until)
	}
	if _, err := ReadUsage(lc.acct); !errors.Is(err, tenantfs.ErrSymlink) {
		t.Errorf("ReadUsage of a link: %v, want ErrSymlink", err)
	}
	// The acct dir itself replaced by a link to a host dir.
	if err := os.RemoveAll(lc.acct); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, usageFile), usageBytes(classLatencyCritical, math.MaxUint64), 0o600)
	if err := os.Symlink(dir, lc.acct); err != nil {
		t.Fatal(err)
	}
	if until := publishFresh(pub); until != 0 {
		t.Errorf("board %d from an acct dir that links to a host dir", until)
	}
	if _, err := ReadUsage(lc.acct); !errors.Is(err, tenantfs.ErrSymlink) {
		t.Errorf("ReadUsage through a linked acct dir: %v, want ErrSymlink", err)
	}
}

// A usage file that is a FIFO blocks neither the publisher nor ReadUsage.
func TestFIFOUsageDoesNotBlock(t *testing.T) {
	state := t.TempDir()
	lc := newTenant(t, state, 1, "latency-critical", 6000)
	if err := syscall.Mkfifo(filepath.Join(lc.acct, usageFile), 0o666); err != nil {
		t.Fatal(err)
	}
	pub := openPublisher(t, state)
	done := make(chan error, 1)
	go func() {
		for i := 0; i < 100; i++ {
			publishFresh(pub)
		}
		_, err := ReadUsage(lc.acct)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, tenantfs.ErrNotRegular) {
			t.Errorf("ReadUsage of a FIFO: %v, want ErrNotRegular", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a FIFO named usage blocked the publisher or ReadUsage")
	}
}

// A usage file bigger than the layout (a sparse GiB) is refused, not read.
func TestHugeUsageRefused(t *testing.T) {
	state := t.TempDir()
	lc := newTenant(t, state, 1, "latency-critical", 6000)
	writeUsage(t, lc, usageBytes(0, monotonicNow()+5_000_000_000))
	if err := os.Truncate(filepath.Join(lc.acct, usageFile), 1<<30); err != nil {
		t.Fatal(err)
	}
	pub := openPublisher(t, state)
	if until := publishFresh(pub); until != 0 {
		t.Errorf("board %d from a 1 GiB usage file", until)
	}
	if _, err := ReadUsage(lc.acct); !errors.Is(err, tenantfs.ErrTooBig) {
		t.Errorf("ReadUsage of a 1 GiB file: %v, want ErrTooBig", err)
	}
}

// A latency-critical tenant that writes to its wake FIFO without end is
// heard at most twice per half window (20 ms here), plus the wake-up that
// arms its held FIFO again, and its next real start is still published.
func TestWakeFloodIsRateLimited(t *testing.T) {
	state := t.TempDir()
	lc := newTenant(t, state, 1, "latency-critical", 40000)
	writeUsage(t, lc, usageBytes(0, 0))
	pub := openPublisher(t, state)
	pub.Publish() // opens the usage file and makes the FIFO
	w, err := os.OpenFile(filepath.Join(lc.acct, wakeFile), os.O_RDWR|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	runPublisher(t, pub)
	time.Sleep(20 * time.Millisecond)
	reads0 := pub.readsSoFar()
	stop := time.Now().Add(time.Second)
	for time.Now().Before(stop) {
		w.Write([]byte("wwwwwwww"))
	}
	// per 20 ms half window two wake-ups and the held FIFO's arming (150),
	// 4 rescans, and slack for a loaded machine; unlimited it is thousands
	if n := pub.readsSoFar() - reads0; n > 200 {
		t.Errorf("%d reads in a second of flooding, want at most 200", n)
	} else {
		t.Logf("%d reads in a second of flooding", n)
	}
	until := monotonicNow() + uint64(30*time.Millisecond)
	writeUsage(t, lc, usageBytes(0, until))
	w.Write([]byte("w"))
	deadline := time.Now().Add(RescanInterval + 300*time.Millisecond)
	for {
		if got, _ := pub.Board(); got > monotonicNow() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a start after the flood was not published")
		}
		time.Sleep(time.Millisecond)
	}
}
