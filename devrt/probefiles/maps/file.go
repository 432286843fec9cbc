package maps

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/devmap"
	"github.com/gpuext/gpuext/lib/tenantfs"
)

// The .maps file written by the interposer (devrt/lib/probe_copyout.c
// gx_write_maps), laid out by devrt/include/gpuext_devrt_maps.h (Magic,
// Version, HeaderSize, NameSize, MaxMaps and the offsets are generated from
// it into layout_gen.go):
//
//	header, 48 bytes, little-endian: magic "GXPMAPS\0", u32 version, u32
//	pid, u32 image index, u32 map count, u64 copy sequence number (1, 2,
//	... per image), u64 CLOCK_REALTIME of the copy (ns), u32 tenant id, u32
//	final (1: the copy at process exit)
//	per map: name[64] (NUL padded), u64 bytes (0: the image has no such
//	symbol), then the symbol's bytes (descriptor + data) padded to 8.
//
// The file is written inside the tenant's container and read by root: every
// size in it is checked against what is left of the file before it is used.

// MaxFileSize is the largest .maps file Decode reads: the headers of MaxMaps
// maps and 1 GiB of map symbols, the most device memory abi.Layout gives
// one map (a module whose maps hold more in all is not decoded).
const MaxFileSize = HeaderSize + MaxMaps*entrySize + abi.MaxMapData

// ErrFormat is wrapped by errors for bytes that are not a .maps file.
var ErrFormat = errors.New("not a device maps file")

// File is one decoded .maps file: the maps of one image of one process.
type File struct {
	PID    uint32 `json:"pid"`
	Image  uint32 `json:"image"`
	Seq    uint64 `json:"seq"`
	TimeNs uint64 `json:"timeNs"`
	Tenant uint32 `json:"tenant"`
	Final  bool   `json:"final"`
	Maps   []Map  `json:"maps"`
}

// Map is one map symbol as copied out of the device.
type Map struct {
	Name string `json:"name"`
	// Present is false when the image had no such symbol.
	Present bool          `json:"present"`
	Layout  abi.MapLayout `json:"layout"`
	// Bytes is the symbol: the 32-byte descriptor, then the data.
	Bytes []byte `json:"-"`
}

// ReadFile reads and decodes a .maps file that someone else (the tenant)
// wrote: a regular file, opened without following a symbolic link and
// without waiting on a FIFO, at most MaxFileSize bytes (a link to /dev/zero
// or a sparse file of many GiB is refused before it is read).
func ReadFile(path string) (*File, error) {
	b, err := tenantfs.ReadFile(path, int64(MaxFileSize))
	if errors.Is(err, tenantfs.ErrNotRegular) || errors.Is(err, tenantfs.ErrTooBig) {
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if err != nil {
		return nil, err
	}
	m, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// Decode parses a .maps file. It reads every count and size from the file
// only after checking it against what is left, so no input makes it panic,
// allocate more than the file or loop longer than the file is long.
func Decode(b []byte) (*File, error) {
	le := binary.LittleEndian
	if uint64(len(b)) > MaxFileSize {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrFormat, len(b), uint64(MaxFileSize))
	}
	if len(b) < HeaderSize || string(b[hdrOffMagic:hdrOffMagic+len(Magic)]) != Magic {
		return nil, fmt.Errorf("%w: no %q header", ErrFormat, "GXPMAPS")
	}
	if v := le.Uint32(b[hdrOffVersion:]); v != Version {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrFormat, v, Version)
	}
	final := le.Uint32(b[hdrOffFinal:])
	if final > 1 {
		return nil, fmt.Errorf("%w: final is %d, want 0 or 1", ErrFormat, final)
	}
	f := &File{PID: le.Uint32(b[hdrOffPID:]), Image: le.Uint32(b[hdrOffImage:]), Seq: le.Uint64(b[hdrOffSeq:]),
		TimeNs: le.Uint64(b[hdrOffTimeNs:]), Tenant: le.Uint32(b[hdrOffTenant:]), Final: final == 1}
	n := le.Uint32(b[hdrOffNMaps:])
	if n > MaxMaps {
		return nil, fmt.Errorf("%w: %d maps, at most %d", ErrFormat, n, MaxMaps)
	}
	if uint64(n)*entrySize > uint64(len(b)-HeaderSize) {
		return nil, fmt.Errorf("%w: %d maps, the file has room for the headers of %d", ErrFormat, n, (len(b)-HeaderSize)/entrySize)
	}
	rest := b[HeaderSize:]
	f.Maps = make([]Map, 0, n)
	for i := uint32(0); i < n; i++ {
		if len(rest) < entrySize {
			return nil, fmt.Errorf("%w: map %d of %d: truncated header", ErrFormat, i, n)
		}
		name, err := mapName(rest[entryOffName : entryOffName+NameSize])
		if err != nil {
			return nil, fmt.Errorf("%w: map %d of %d: %w", ErrFormat, i, n, err)
		}
		for _, m := range f.Maps {
			if m.Name == name {
				return nil, fmt.Errorf("%w: map %q given twice", ErrFormat, name)
			}
		}
		size := le.Uint64(rest[entryOffBytes:])
		rest = rest[entrySize:]
		m := Map{Name: name}
		if size > 0 {
			left := uint64(len(rest))
			if size < abi.MapHdrSize || size > left || left-size < (8-size%8)%8 {
				return nil, fmt.Errorf("%w: map %q: %d bytes, file has %d left", ErrFormat, name, size, left)
			}
			m.Present = true
			m.Bytes = rest[:size:size]
			l, err := descriptor(m.Bytes)
			if err != nil {
				return nil, fmt.Errorf("map %q: %w", name, err)
			}
			m.Layout = l
			rest = rest[size+(8-size%8)%8:]
		}
		f.Maps = append(f.Maps, m)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last map", ErrFormat, len(rest))
	}
	return f, nil
}

// mapName reads a NUL padded name: at most NameSize-1 bytes of printable
// ASCII (what module.conf's names are), nothing but NULs after it.
func mapName(b []byte) (string, error) {
	name, pad, _ := bytes.Cut(b, []byte{0})
	if len(name) == 0 || len(name) >= len(b) {
		return "", fmt.Errorf("the name is empty or not NUL terminated")
	}
	if bytes.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return "", fmt.Errorf("name %q is not printable ASCII", name)
	}
	if bytes.ContainsFunc(pad, func(r rune) bool { return r != 0 }) {
		return "", fmt.Errorf("name %q has bytes after its NUL", name)
	}
	return string(name), nil
}

// descriptor reads struct gpuext_dmap and checks that the symbol holds the
// data it announces and that the layout is the one abi.Layout computes
// (which bounds every size of it before it computes with them).
func descriptor(sym []byte) (abi.MapLayout, error) {
	le := binary.LittleEndian
	l := abi.MapLayout{
		Type: abi.MapType(le.Uint32(sym[0:])), KeySize: le.Uint32(sym[4:]), ValueSize: le.Uint32(sym[8:]),
		MaxEntries: le.Uint32(sym[12:]), NBuckets: le.Uint32(sym[16:]), Stride: le.Uint32(sym[20:]),
		DataSize: le.Uint64(sym[24:]),
	}
	if l.DataSize != uint64(len(sym))-abi.MapHdrSize {
		return l, fmt.Errorf("%w: symbol has %d bytes, descriptor says %d after its %d", ErrFormat, len(sym), l.DataSize, abi.MapHdrSize)
	}
	var want abi.MapLayout
	var err error
	if l.Type == abi.MapPerThread {
		// the row count is the map's own (map_extra): bounded by the layout
		want, err = abi.PerThreadLayout(l.KeySize, l.ValueSize, l.MaxEntries, l.NBuckets)
	} else {
		want, err = abi.Layout(l.Type, l.KeySize, l.ValueSize, l.MaxEntries)
	}
	if err != nil {
		return l, fmt.Errorf("%w: descriptor: %w", ErrFormat, err)
	}
	if want != l {
		return l, fmt.Errorf("%w: descriptor %+v, the layout of its type and sizes is %+v", ErrFormat, l, want)
	}
	return l, nil
}

// Encode is the inverse of Decode (tests and tools build files with it).
func Encode(f *File) []byte {
	le := binary.LittleEndian
	b := make([]byte, HeaderSize)
	copy(b[hdrOffMagic:], Magic)
	le.PutUint32(b[hdrOffVersion:], Version)
	le.PutUint32(b[hdrOffPID:], f.PID)
	le.PutUint32(b[hdrOffImage:], f.Image)
	le.PutUint32(b[hdrOffNMaps:], uint32(len(f.Maps)))
	le.PutUint64(b[hdrOffSeq:], f.Seq)
	le.PutUint64(b[hdrOffTimeNs:], f.TimeNs)
	le.PutUint32(b[hdrOffTenant:], f.Tenant)
	if f.Final {
		le.PutUint32(b[hdrOffFinal:], 1)
	}
	for _, m := range f.Maps {
		h := make([]byte, entrySize)
		copy(h[entryOffName:entryOffName+NameSize-1], m.Name)
		if m.Present {
			le.PutUint64(h[entryOffBytes:], uint64(len(m.Bytes)))
		}
		b = append(b, h...)
		if m.Present {
			b = append(b, m.Bytes...)
			b = append(b, make([]byte, (8-len(m.Bytes)%8)%8)...)
		}
	}
	return b
}

// image views the map through the device map specification of gpubpf/devmap.
func (m Map) image() *devmap.Image { return &devmap.Image{Layout: m.Layout, Bytes: m.Bytes} }

// Entries decodes the map: every index of an array, the live keys of a
// hash, every index of a per-warp array summed over the warp slots (as
// little-endian u64 words), the records of a ringbuf keyed by sequence.
func (m Map) Entries() ([]devmap.Entry, error) {
	if !m.Present {
		return nil, nil
	}
	return m.image().Entries()
}

// Counters returns the u64 values of an array, per-warp or per-thread map
// of 8-byte values, by index (per-warp and per-thread: summed over the warp
// slots or the threads' rows).
func (m Map) Counters() ([]uint64, error) {
	if !m.Present {
		return nil, nil
	}
	if (m.Layout.Type != abi.MapArray && m.Layout.Type != abi.MapPerWarp && m.Layout.Type != abi.MapPerThread) || m.Layout.ValueSize != 8 {
		return nil, fmt.Errorf("map %q: a %s map of %d-byte values is not an array of u64 counters", m.Name, m.Layout.Type, m.Layout.ValueSize)
	}
	ents, err := m.Entries()
	if err != nil {
		return nil, fmt.Errorf("map %q: %w", m.Name, err)
	}
	out := make([]uint64, len(ents))
	for i, e := range ents {
		out[i] = binary.LittleEndian.Uint64(e.Value)
	}
	return out, nil
}

// Ringbuf returns a ringbuf map's records, in order, and how many were dropped.
func (m Map) Ringbuf() (records [][]byte, dropped uint64, err error) {
	if !m.Present {
		return nil, 0, nil
	}
	if m.Layout.Type != abi.MapRingbuf {
		return nil, 0, fmt.Errorf("map %q: a %s map is not a ringbuf", m.Name, m.Layout.Type)
	}
	ents, err := m.Entries()
	if err != nil {
		return nil, 0, fmt.Errorf("map %q: %w", m.Name, err)
	}
	for _, e := range ents {
		records = append(records, e.Value)
	}
	return records, abi.RingDropped(m.Layout, m.Bytes[abi.MapHdrSize:]), nil
}
