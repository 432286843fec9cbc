package board

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/lib/tenantfs"
)

// ErrUsageInvalid is wrapped by ReadUsage's errors for a usage file that
// is there but holds no usage: shorter than the layout (truncated), or
// not initialised.
var ErrUsageInvalid = errors.New("invalid usage file")

// Usage is what a tenant's usage file says (the tenant view of the CLI).
type Usage struct {
	TenantID        uint64
	QuotaBytes      uint64
	UsedBytes       uint64 // sum over the slots of processes that hold memory now
	PeakBytes       uint64
	RefusedAllocs   uint64
	DelayedLaunches uint64
	Launches        uint64
	// Synced counts the waits for the GPU that returned, every class:
	// completed work (a tenant with live processes whose count stands still
	// makes no progress).
	Synced uint64
	// LCRequests and LCRequestTime are a latency-critical tenant's ended
	// requests and their summed durations; Latency their histogram.
	LCRequests    uint64
	LCRequestTime time.Duration
	Latency       Histogram
	// LiveProcesses is how many slots have a live owner.
	LiveProcesses int
	// Exits counts the tenant's processes that used the GPU and called
	// exit(); FailedExits those whose status was not 0.
	Exits, FailedExits uint64
}

// ReadUsage reads the usage file of the tenant accounting dir acctDir
// (<stateDir>/acct/<id>: its parent is the host's, acctDir itself and the
// file are the tenant's). The file is opened through lib/tenantfs (no
// links, a regular file of at most the layout's size) and read with pread.
// A slot counts only while its owner lives: owners hold an
// open-file-description lock on their slot (the device runtime's liveness
// beacon), and a slot nobody holds belongs to a process that died.
func ReadUsage(acctDir string) (Usage, error) {
	d, err := tenantfs.OpenDir(filepath.Dir(acctDir), filepath.Base(acctDir))
	if err != nil {
		return Usage{}, err
	}
	defer d.Close()
	f, err := d.Open(usageFile, usageSize)
	if err != nil {
		return Usage{}, err
	}
	defer f.Close()
	data := make([]byte, usageSize)
	if n, err := f.ReadAt(data, 0); n < usageSize {
		return Usage{}, fmt.Errorf("usage file %s: %w: %d bytes, want %d: %w", f.Path(), ErrUsageInvalid, n, usageSize, err)
	}
	le := func(off int) uint64 { return le64(data, off) }
	if le(usageOffMagic) != usageMagic {
		return Usage{}, fmt.Errorf("usage file %s: %w: not initialised", f.Path(), ErrUsageInvalid)
	}
	u := Usage{TenantID: le(usageOffTenantID), QuotaBytes: le(usageOffQuota), PeakBytes: le(usageOffPeak),
		RefusedAllocs: le(usageOffRefused), DelayedLaunches: le(usageOffDelayed), Launches: le(usageOffLaunches),
		Synced: le(usageOffSynced), LCRequests: le(usageOffLCRequests), LCRequestTime: time.Duration(min(le(usageOffLCRequestNs), math.MaxInt64)),
		Exits: le(usageOffExits), FailedExits: le(usageOffFailedExits)}
	for i := range u.Latency {
		u.Latency[i] = le(usageOffLatency + 8*i)
	}
	for i := 0; i < nSlots; i++ {
		off := slotsOffset + i*slotSize
		if *(*uint32)(unsafe.Pointer(&data[off+slotOffPid])) == 0 {
			continue
		}
		// OFD locks: l_pid must be 0; a lock held by any other open of the file shows.
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: int64(off), Len: 1}
		if err := unix.FcntlFlock(uintptr(f.Fd()), unix.F_OFD_GETLK, &lk); err == nil && lk.Type == unix.F_UNLCK {
			continue // its owner is gone
		}
		u.UsedBytes += le(off + slotOffBytes)
		u.LiveProcesses++
	}
	return u, nil
}

// UsageFileName is the usage file's name in a tenant's accounting dir, and
// UsageFileSize its size (devrt/include/gpuext_devrt_shm.h).
const (
	UsageFileName = usageFile
	UsageFileSize = usageSize
)

// EncodeUsage is a usage file as the device runtime lays it out, holding
// u's counters and no live slot (so UsedBytes reads back as 0): for tests
// of the host's readers, which have no device runtime to write one.
func EncodeUsage(u Usage) []byte {
	b := make([]byte, usageSize)
	put := func(off int, v uint64) { *(*uint64)(unsafe.Pointer(&b[off])) = v }
	put(usageOffMagic, usageMagic)
	*(*uint32)(unsafe.Pointer(&b[usageOffVersion])) = shmVersion
	put(usageOffTenantID, u.TenantID)
	put(usageOffQuota, u.QuotaBytes)
	put(usageOffPeak, u.PeakBytes)
	put(usageOffRefused, u.RefusedAllocs)
	put(usageOffDelayed, u.DelayedLaunches)
	put(usageOffLaunches, u.Launches)
	put(usageOffSynced, u.Synced)
	put(usageOffLCRequests, u.LCRequests)
	put(usageOffExits, u.Exits)
	put(usageOffFailedExits, u.FailedExits)
	put(usageOffLCRequestNs, uint64(u.LCRequestTime))
	for i, n := range u.Latency {
		put(usageOffLatency+8*i, n)
	}
	return b
}
