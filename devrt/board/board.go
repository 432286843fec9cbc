// Package board is the host side of the device runtime's priority: it
// publishes the board (docs/devrt.md) that every container maps read-only.
// Each latency-critical tenant's processes record, in their own tenant's
// usage file, until when they have work pending on the GPU; the publisher
// copies the latest such deadline to the board; best-effort launches wait
// while it lies in the future. No tenant writes anything another tenant
// reads. The layouts come from devrt/include/gpuext_devrt_shm.h through the
// generated layout_gen.go.
package board

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FileName is the board's file name in the board directory.
const FileName = "board"

// Publisher writes the board from the tenants' usage files.
type Publisher struct {
	acctRoot string // <stateDir>/acct: one directory per tenant, each with a usage file
	board    []byte
	tenants  map[string][]byte // tenant dir name -> mapped usage file
	rescan   time.Time
}

// Open maps (creating it if needed) boardDir/board and prepares to read the
// usage files under acctRoot.
func Open(boardDir, acctRoot string) (*Publisher, error) {
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
	p := &Publisher{acctRoot: acctRoot, board: mem, tenants: map[string][]byte{}}
	*(*uint32)(unsafe.Pointer(&mem[boardOffVersion])) = shmVersion
	*(*uint32)(unsafe.Pointer(&mem[boardOffSize])) = boardSize
	atomic.StoreUint64(p.u64(mem, boardOffMagic), boardMagic) // last: readers check it first
	return p, nil
}

func (p *Publisher) u64(mem []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&mem[off])) }

// Close unmaps everything; the board file stays.
func (p *Publisher) Close() {
	for _, m := range p.tenants {
		_ = unix.Munmap(m)
	}
	p.tenants = nil
	if p.board != nil {
		_ = unix.Munmap(p.board)
		p.board = nil
	}
}

// scan maps the usage files of tenants that appeared and drops those gone.
func (p *Publisher) scan() {
	ents, _ := os.ReadDir(p.acctRoot)
	seen := map[string]bool{}
	for _, e := range ents {
		seen[e.Name()] = true
		if _, ok := p.tenants[e.Name()]; ok {
			continue
		}
		f, err := os.Open(filepath.Join(p.acctRoot, e.Name(), "usage"))
		if err != nil {
			continue // no CUDA process in that tenant yet
		}
		if fi, err := f.Stat(); err != nil || fi.Size() < usageHeaderSize {
			f.Close()
			continue
		}
		mem, err := unix.Mmap(int(f.Fd()), 0, usageHeaderSize, unix.PROT_READ, unix.MAP_SHARED)
		f.Close()
		if err == nil {
			p.tenants[e.Name()] = mem
		}
	}
	for name, m := range p.tenants {
		if !seen[name] {
			_ = unix.Munmap(m)
			delete(p.tenants, name)
		}
	}
	p.rescan = time.Now().Add(100 * time.Millisecond)
}

// Publish computes the latest latency-critical deadline and writes it to the
// board. It returns that deadline (CLOCK_MONOTONIC ns; 0 when none).
func (p *Publisher) Publish() uint64 {
	if time.Now().After(p.rescan) {
		p.scan()
	}
	var until uint64
	for _, m := range p.tenants {
		if atomic.LoadUint64(p.u64(m, usageOffMagic)) != usageMagic ||
			atomic.LoadUint32((*uint32)(unsafe.Pointer(&m[usageOffClass]))) != classLatencyCritical {
			continue
		}
		if u := atomic.LoadUint64(p.u64(m, usageOffLCActiveUntil)); u > until {
			until = u
		}
	}
	if atomic.LoadUint64(p.u64(p.board, boardOffLCActiveUntil)) != until {
		atomic.StoreUint64(p.u64(p.board, boardOffLCActiveUntil), until)
		atomic.AddUint64(p.u64(p.board, boardOffSeq), 1)
	}
	return until
}

// Run publishes every interval until ctx is done.
func (p *Publisher) Run(ctx context.Context, interval time.Duration) {
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

// Usage is what a tenant's usage file says (the tenant view of the CLI).
type Usage struct {
	TenantID        uint64
	QuotaBytes      uint64
	UsedBytes       uint64 // sum over the slots of processes that hold memory now
	PeakBytes       uint64
	RefusedAllocs   uint64
	DelayedLaunches uint64
	Launches        uint64
}

// ReadUsage reads a tenant's usage file. A slot counts only while its owner
// lives: owners hold a record lock on their slot (the device runtime's
// liveness beacon), and a slot nobody holds belongs to a process that died.
func ReadUsage(path string) (Usage, error) {
	f, err := os.Open(path)
	if err != nil {
		return Usage{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, usageSize+1))
	if err != nil {
		return Usage{}, err
	}
	if len(data) < usageSize {
		return Usage{}, fmt.Errorf("usage file %s: %d bytes, want %d", path, len(data), usageSize)
	}
	le := func(off int) uint64 { return *(*uint64)(unsafe.Pointer(&data[off])) }
	if le(usageOffMagic) != usageMagic {
		return Usage{}, fmt.Errorf("usage file %s: not initialised", path)
	}
	u := Usage{TenantID: le(usageOffTenantID), QuotaBytes: le(usageOffQuota), PeakBytes: le(usageOffPeak),
		RefusedAllocs: le(usageOffRefused), DelayedLaunches: le(usageOffDelayed), Launches: le(usageOffLaunches)}
	for i := 0; i < nSlots; i++ {
		off := slotsOffset + i*slotSize
		if *(*uint32)(unsafe.Pointer(&data[off+slotOffPid])) == 0 {
			continue
		}
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: int64(off), Len: 1}
		if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk); err == nil && lk.Type == unix.F_UNLCK {
			continue // its owner is gone
		}
		u.UsedBytes += le(off + slotOffBytes)
	}
	return u, nil
}
