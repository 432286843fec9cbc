package launches

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gpuext/gpuext/lib/tenantfs"
)

// The .launches file written by the interposer (devrt/lib/probe_hostlaunch.c
// gx_hl_write), laid out by devrt/include/gpuext_devrt_launches.h (the
// constants of layout_gen.go are generated from it):
//
//	header, HeaderSize bytes: magic "GXPLNCH\0", u32 version, u32 pid, u64
//	seq, u64 time, u32 tenant, u32 final, u32 rows, u32 coverage entries,
//	u32 flags, u32 distinct kernels, u64 graph launches, u64 launches
//	without a latency, u64 calibration round trip (ns), u64 latency
//	histogram[64] (log2 ns)
//	coverage entries, CoverageSize bytes each
//	rows, RowSize bytes each
//
// The file is written inside the tenant's container and read by root:
// Decode checks its size against the counts before it reads an entry.

// MaxFileSize is the largest .launches file: the header, every coverage
// entry and every row.
const MaxFileSize = HeaderSize + MaxCoverage*CoverageSize + MaxRows*RowSize

// maxNameLen bounds a kernel name's length as the file states it (the
// prefix is NameSize-1 bytes at most; a length is only shown).
const maxNameLen = 1 << 20

// ErrFormat is wrapped by errors for bytes that are not a .launches file.
var ErrFormat = errors.New("not a launches file")

// Measured says how a launch was observed.
type Measured string

const (
	// Device: the kernel's image carries the device probes; their maps count it.
	Device Measured = "device"
	// Host: the image could not be patched or the kernel is not probed;
	// the host's launch arguments and events are what is known.
	Host Measured = "host"
	// None: launches known to have happened whose kernels the host could
	// not see (replays of a graph whose nodes it could not read).
	None Measured = "none"
)

// Measures are the classes in the order they are shown.
var Measures = []Measured{Device, Host, None}

func measuredOf(v uint32) (Measured, error) {
	switch v {
	case measuredDevice:
		return Device, nil
	case measuredHost:
		return Host, nil
	case measuredNone:
		return None, nil
	}
	return "", fmt.Errorf("measured is %d, want %d, %d or %d", v, measuredDevice, measuredHost, measuredNone)
}

// File is one decoded .launches file: one process's launches.
type File struct {
	PID    uint32 `json:"pid"`
	Seq    uint64 `json:"seq"`
	TimeNs uint64 `json:"timeNs"`
	Tenant uint32 `json:"tenant"`
	Final  bool   `json:"final"`
	// Latency: host-measured launches got an event for their latency.
	Latency bool `json:"latency"`
	// Kernels is how many distinct kernels the process launched (rows or not).
	Kernels       uint32 `json:"kernels"`
	GraphLaunches uint64 `json:"graphLaunches"`
	// LatSkipped: host-measured launches that went without a latency (no
	// free event, another thread measuring, an event error).
	LatSkipped uint64 `json:"latencySkipped"`
	// LatCalibNs is the event clock calibration's round trip: a latency is
	// within half of it.
	LatCalibNs uint64              `json:"latencyCalibrationNs"`
	LatHist    [HistBuckets]uint64 `json:"-"`
	Coverage   []Coverage          `json:"coverage"`
	Rows       []Row               `json:"rows"`
}

// Coverage is the launches of one class and reason.
type Coverage struct {
	Measured Measured `json:"measured"`
	// Reason is "ok" for device; for host the image's reason (sass-only,
	// ptx-newer-than-device:sm_100, compressed-ptx:..., jit-failed:218,
	// kernel-not-listed, image-not-seen, kernel-table-full); for none why
	// the kernels were not seen.
	Reason   string `json:"reason"`
	Kernels  uint32 `json:"kernels"`
	Launches uint64 `json:"launches"`
	Blocks   uint64 `json:"blocks"`
}

// Row is one kernel (or the "other" row of a class).
type Row struct {
	// KernelID is FNV-1a 64 of the whole name (abi.KernelID); 0 in an "other" row.
	KernelID uint64 `json:"kernelId"`
	// Name is the name's first bytes; NameLen the whole name's length.
	Name      string   `json:"name"`
	NameLen   uint32   `json:"nameLen"`
	Truncated bool     `json:"truncated,omitempty"`
	Measured  Measured `json:"measured"`
	Reason    string   `json:"reason"`
	// Image is the image index in its process, -1 when the interposer did not see it load.
	Image         int64     `json:"image"`
	Kernels       uint32    `json:"kernels"`
	Launches      uint64    `json:"launches"`
	GraphLaunches uint64    `json:"graphLaunches,omitempty"`
	Blocks        uint64    `json:"blocks"`
	GridLast      [3]uint32 `json:"gridLast"`
	BlockLast     [3]uint32 `json:"blockLast"`
	MaxBlocks     uint64    `json:"maxBlocks"`
	MaxThreads    uint32    `json:"maxThreads"`
	LatCount      uint64    `json:"latencyCount,omitempty"`
	LatSumNs      uint64    `json:"latencySumNs,omitempty"`
	LatMinNs      uint64    `json:"latencyMinNs,omitempty"`
	LatMaxNs      uint64    `json:"latencyMaxNs,omitempty"`
}

// Other is whether r is an "other" row (the kernels past the top of its class).
func (r Row) Other() bool { return r.KernelID == 0 && r.Name == OtherName }

// ReadFile reads and decodes a .launches file that someone else (the
// tenant) wrote: a regular file, opened without following a symbolic link
// and without waiting on a FIFO, at most MaxFileSize bytes.
func ReadFile(path string) (*File, error) {
	b, err := tenantfs.ReadFile(path, MaxFileSize)
	if errors.Is(err, tenantfs.ErrNotRegular) || errors.Is(err, tenantfs.ErrTooBig) {
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if err != nil {
		return nil, err
	}
	d, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// Decode parses a .launches file. Every count is checked against the
// file's size before an entry is read, so no input makes it panic,
// allocate more than MaxFileSize allows or loop longer than the file.
func Decode(b []byte) (*File, error) {
	le := binary.LittleEndian
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrFormat, len(b), MaxFileSize)
	}
	if len(b) < HeaderSize || string(b[hdrOffMagic:hdrOffMagic+len(Magic)]) != Magic {
		return nil, fmt.Errorf("%w: no %q header", ErrFormat, "GXPLNCH")
	}
	if v := le.Uint32(b[hdrOffVersion:]); v != Version {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrFormat, v, Version)
	}
	final, flags := le.Uint32(b[hdrOffFinal:]), le.Uint32(b[hdrOffFlags:])
	if final > 1 {
		return nil, fmt.Errorf("%w: final is %d, want 0 or 1", ErrFormat, final)
	}
	if flags&^flagLatency != 0 {
		return nil, fmt.Errorf("%w: unknown flags %#x", ErrFormat, flags)
	}
	nrows, ncov := le.Uint32(b[hdrOffNRows:]), le.Uint32(b[hdrOffNCoverage:])
	if nrows > MaxRows || ncov > MaxCoverage {
		return nil, fmt.Errorf("%w: %d rows and %d coverage entries, at most %d and %d", ErrFormat, nrows, ncov, MaxRows, MaxCoverage)
	}
	if want := HeaderSize + int(ncov)*CoverageSize + int(nrows)*RowSize; len(b) != want {
		return nil, fmt.Errorf("%w: %d bytes, %d rows and %d coverage entries make %d", ErrFormat, len(b), nrows, ncov, want)
	}
	f := &File{PID: le.Uint32(b[hdrOffPID:]), Seq: le.Uint64(b[hdrOffSeq:]), TimeNs: le.Uint64(b[hdrOffTimeNs:]),
		Tenant: le.Uint32(b[hdrOffTenant:]), Final: final == 1, Latency: flags&flagLatency != 0,
		Kernels: le.Uint32(b[hdrOffKernels:]), GraphLaunches: le.Uint64(b[hdrOffGraphLaunches:]),
		LatSkipped: le.Uint64(b[hdrOffLatSkipped:]), LatCalibNs: le.Uint64(b[hdrOffLatCalibNs:]),
		Coverage: make([]Coverage, 0, ncov), Rows: make([]Row, 0, nrows)}
	for i := range f.LatHist {
		f.LatHist[i] = le.Uint64(b[hdrOffLatHist+8*i:])
	}
	off := HeaderSize
	for i := uint32(0); i < ncov; i++ {
		e := b[off : off+CoverageSize]
		off += CoverageSize
		m, err := measuredOf(le.Uint32(e[covOffMeasured:]))
		if err != nil {
			return nil, fmt.Errorf("%w: coverage %d: %w", ErrFormat, i, err)
		}
		reason, err := text(e[covOffReason:covOffReason+ReasonSize], false)
		if err != nil {
			return nil, fmt.Errorf("%w: coverage %d: reason: %w", ErrFormat, i, err)
		}
		c := Coverage{Measured: m, Reason: reason, Kernels: le.Uint32(e[covOffKernels:]),
			Launches: le.Uint64(e[covOffLaunches:]), Blocks: le.Uint64(e[covOffBlocks:])}
		for _, o := range f.Coverage {
			if o.Measured == c.Measured && o.Reason == c.Reason {
				return nil, fmt.Errorf("%w: coverage %s %q given twice", ErrFormat, c.Measured, c.Reason)
			}
		}
		f.Coverage = append(f.Coverage, c)
	}
	for i := uint32(0); i < nrows; i++ {
		e := b[off : off+RowSize]
		off += RowSize
		r, err := row(e)
		if err != nil {
			return nil, fmt.Errorf("%w: row %d: %w", ErrFormat, i, err)
		}
		f.Rows = append(f.Rows, r)
	}
	return f, nil
}

func row(e []byte) (Row, error) {
	le := binary.LittleEndian
	m, err := measuredOf(le.Uint32(e[rowOffMeasured:]))
	if err != nil {
		return Row{}, err
	}
	name, err := text(e[rowOffName:rowOffName+NameSize], true)
	if err != nil {
		return Row{}, fmt.Errorf("name: %w", err)
	}
	reason, err := text(e[rowOffReason:rowOffReason+ReasonSize], false)
	if err != nil {
		return Row{}, fmt.Errorf("reason: %w", err)
	}
	r := Row{KernelID: le.Uint64(e[rowOffKernelID:]), Name: name, NameLen: le.Uint32(e[rowOffNameLen:]),
		Measured: m, Reason: reason, Image: int64(le.Uint32(e[rowOffImage:])), Kernels: le.Uint32(e[rowOffKernels:]),
		Launches: le.Uint64(e[rowOffLaunches:]), GraphLaunches: le.Uint64(e[rowOffGraphLaunches:]),
		Blocks: le.Uint64(e[rowOffBlocks:]), MaxBlocks: le.Uint64(e[rowOffMaxBlocks:]),
		MaxThreads: le.Uint32(e[rowOffMaxThreads:]), LatCount: le.Uint64(e[rowOffLatCount:]),
		LatSumNs: le.Uint64(e[rowOffLatSum:]), LatMinNs: le.Uint64(e[rowOffLatMin:]), LatMaxNs: le.Uint64(e[rowOffLatMax:])}
	if r.Image == 0xffffffff {
		r.Image = -1
	}
	for i := 0; i < 3; i++ {
		r.GridLast[i] = le.Uint32(e[rowOffGridLast+4*i:])
		r.BlockLast[i] = le.Uint32(e[rowOffBlockLast+4*i:])
	}
	switch {
	case int(r.NameLen) < len(r.Name) || r.NameLen > maxNameLen:
		return r, fmt.Errorf("name %.40q: length %d, the prefix has %d", r.Name, r.NameLen, len(r.Name))
	case int(r.NameLen) > len(r.Name) && len(r.Name) != NameSize-1:
		return r, fmt.Errorf("name %.40q: length %d, yet the prefix is not full", r.Name, r.NameLen)
	case le.Uint32(e[rowOffPad:]) != 0:
		return r, fmt.Errorf("kernel %.40q: padding is not zero", r.Name)
	case r.Kernels == 0:
		return r, fmt.Errorf("kernel %.40q: no kernels", r.Name)
	case r.GraphLaunches > r.Launches || r.LatCount > r.Launches:
		return r, fmt.Errorf("kernel %.40q: %d launches, yet %d in graphs and %d timed", r.Name, r.Launches, r.GraphLaunches, r.LatCount)
	case r.LatCount > 0 && r.LatMinNs > r.LatMaxNs:
		return r, fmt.Errorf("kernel %.40q: latency min %d above max %d", r.Name, r.LatMinNs, r.LatMaxNs)
	}
	r.Truncated = int(r.NameLen) > len(r.Name)
	return r, nil
}

// text reads a NUL padded string of printable ASCII, not empty, with a NUL
// before the end and nothing but NULs after it; '(' and ')' and the like
// are printable, spaces only in names (never written, but harmless).
func text(b []byte, spaces bool) (string, error) {
	s, pad, _ := bytes.Cut(b, []byte{0})
	if len(s) == 0 || len(s) >= len(b) {
		return "", fmt.Errorf("empty or not NUL terminated")
	}
	if bytes.ContainsFunc(s, func(r rune) bool { return r < ' ' || r >= 0x7f || (r == ' ' && !spaces) }) {
		return "", fmt.Errorf("%.40q is not printable ASCII", s)
	}
	if bytes.ContainsFunc(pad, func(r rune) bool { return r != 0 }) {
		return "", fmt.Errorf("%.40q has bytes after its NUL", s)
	}
	return string(s), nil
}

// Encode is the inverse of Decode (tests and tools build files with it).
// Strings longer than their fields are cut.
func Encode(f *File) []byte {
	le := binary.LittleEndian
	b := make([]byte, HeaderSize, HeaderSize+len(f.Coverage)*CoverageSize+len(f.Rows)*RowSize)
	copy(b[hdrOffMagic:], Magic)
	le.PutUint32(b[hdrOffVersion:], Version)
	le.PutUint32(b[hdrOffPID:], f.PID)
	le.PutUint64(b[hdrOffSeq:], f.Seq)
	le.PutUint64(b[hdrOffTimeNs:], f.TimeNs)
	le.PutUint32(b[hdrOffTenant:], f.Tenant)
	if f.Final {
		le.PutUint32(b[hdrOffFinal:], 1)
	}
	le.PutUint32(b[hdrOffNRows:], uint32(len(f.Rows)))
	le.PutUint32(b[hdrOffNCoverage:], uint32(len(f.Coverage)))
	if f.Latency {
		le.PutUint32(b[hdrOffFlags:], flagLatency)
	}
	le.PutUint32(b[hdrOffKernels:], f.Kernels)
	le.PutUint64(b[hdrOffGraphLaunches:], f.GraphLaunches)
	le.PutUint64(b[hdrOffLatSkipped:], f.LatSkipped)
	le.PutUint64(b[hdrOffLatCalibNs:], f.LatCalibNs)
	for i, v := range f.LatHist {
		le.PutUint64(b[hdrOffLatHist+8*i:], v)
	}
	for _, c := range f.Coverage {
		e := make([]byte, CoverageSize)
		le.PutUint32(e[covOffMeasured:], measuredCode(c.Measured))
		le.PutUint32(e[covOffKernels:], c.Kernels)
		copy(e[covOffReason:covOffReason+ReasonSize-1], c.Reason)
		le.PutUint64(e[covOffLaunches:], c.Launches)
		le.PutUint64(e[covOffBlocks:], c.Blocks)
		b = append(b, e...)
	}
	for _, r := range f.Rows {
		e := make([]byte, RowSize)
		le.PutUint64(e[rowOffKernelID:], r.KernelID)
		copy(e[rowOffName:rowOffName+NameSize-1], r.Name)
		le.PutUint32(e[rowOffNameLen:], r.NameLen)
		le.PutUint32(e[rowOffMeasured:], measuredCode(r.Measured))
		copy(e[rowOffReason:rowOffReason+ReasonSize-1], r.Reason)
		img := uint32(0xffffffff)
		if r.Image >= 0 {
			img = uint32(r.Image)
		}
		le.PutUint32(e[rowOffImage:], img)
		le.PutUint32(e[rowOffKernels:], r.Kernels)
		le.PutUint64(e[rowOffLaunches:], r.Launches)
		le.PutUint64(e[rowOffGraphLaunches:], r.GraphLaunches)
		le.PutUint64(e[rowOffBlocks:], r.Blocks)
		for i := 0; i < 3; i++ {
			le.PutUint32(e[rowOffGridLast+4*i:], r.GridLast[i])
			le.PutUint32(e[rowOffBlockLast+4*i:], r.BlockLast[i])
		}
		le.PutUint64(e[rowOffMaxBlocks:], r.MaxBlocks)
		le.PutUint32(e[rowOffMaxThreads:], r.MaxThreads)
		le.PutUint64(e[rowOffLatCount:], r.LatCount)
		le.PutUint64(e[rowOffLatSum:], r.LatSumNs)
		le.PutUint64(e[rowOffLatMin:], r.LatMinNs)
		le.PutUint64(e[rowOffLatMax:], r.LatMaxNs)
		b = append(b, e...)
	}
	return b
}

func measuredCode(m Measured) uint32 {
	switch m {
	case Device:
		return measuredDevice
	case Host:
		return measuredHost
	case None:
		return measuredNone
	}
	return 0
}
