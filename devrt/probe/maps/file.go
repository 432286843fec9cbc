package maps

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gpuext/gpuext/devrt/probe"
	"github.com/gpuext/gpuext/devrt/probe/ptx"
)

// The .maps file written by the interposer (devrt/lib/probe.c gx_copy_out):
//
//	header, 48 bytes, little-endian:
//	  [0:8]   magic "GXPMAPS\0"
//	  [8:12]  u32 version (1)
//	  [12:16] u32 pid
//	  [16:20] u32 image index
//	  [20:24] u32 map count
//	  [24:32] u64 copy sequence number (1, 2, ... per image)
//	  [32:40] u64 CLOCK_REALTIME of the copy, ns
//	  [40:44] u32 tenant id
//	  [44:48] u32 final (1: the copy at process exit)
//	per map: name[64] (NUL padded), u64 bytes (0: the image has no such
//	symbol), then the symbol's bytes (descriptor + data) padded to 8.
const (
	Magic      = "GXPMAPS\x00"
	Version    = 1
	HeaderSize = 48
	NameSize   = 64
)

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
	Present bool            `json:"present"`
	Layout  probe.MapLayout `json:"layout"`
	// Bytes is the symbol: the 32-byte descriptor, then the data.
	Bytes []byte `json:"-"`
}

// Decode parses a .maps file.
func Decode(b []byte) (*File, error) {
	le := binary.LittleEndian
	if len(b) < HeaderSize || string(b[:8]) != Magic {
		return nil, fmt.Errorf("%w: no %q header", ErrFormat, "GXPMAPS")
	}
	if v := le.Uint32(b[8:]); v != Version {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrFormat, v, Version)
	}
	f := &File{PID: le.Uint32(b[12:]), Image: le.Uint32(b[16:]), Seq: le.Uint64(b[24:]),
		TimeNs: le.Uint64(b[32:]), Tenant: le.Uint32(b[40:]), Final: le.Uint32(b[44:]) != 0}
	n := le.Uint32(b[20:])
	off := uint64(HeaderSize)
	for i := uint32(0); i < n; i++ {
		if uint64(len(b)) < off+NameSize+8 {
			return nil, fmt.Errorf("%w: map %d of %d: truncated header", ErrFormat, i, n)
		}
		name := string(bytes.TrimRight(b[off:off+NameSize], "\x00"))
		size := le.Uint64(b[off+NameSize:])
		off += NameSize + 8
		m := Map{Name: name}
		if size > 0 {
			padded := (size + 7) &^ 7
			if size < probe.MapHdrSize || uint64(len(b))-off < padded {
				return nil, fmt.Errorf("%w: map %q: %d bytes, file has %d left", ErrFormat, name, size, uint64(len(b))-off)
			}
			m.Present = true
			m.Bytes = b[off : off+size : off+size]
			l, err := descriptor(m.Bytes)
			if err != nil {
				return nil, fmt.Errorf("map %q: %w", name, err)
			}
			m.Layout = l
			off += padded
		}
		f.Maps = append(f.Maps, m)
	}
	if off != uint64(len(b)) {
		return nil, fmt.Errorf("%w: %d bytes after the last map", ErrFormat, uint64(len(b))-off)
	}
	return f, nil
}

// descriptor reads struct gpuext_dmap and checks that the symbol holds the
// data it announces and that the layout is the one probe.Layout computes.
func descriptor(sym []byte) (probe.MapLayout, error) {
	le := binary.LittleEndian
	l := probe.MapLayout{
		Type: probe.MapType(le.Uint32(sym[0:])), KeySize: le.Uint32(sym[4:]), ValueSize: le.Uint32(sym[8:]),
		MaxEntries: le.Uint32(sym[12:]), NBuckets: le.Uint32(sym[16:]), Stride: le.Uint32(sym[20:]),
		DataSize: le.Uint64(sym[24:]),
	}
	want, err := probe.Layout(l.Type, l.KeySize, l.ValueSize, l.MaxEntries)
	if err != nil {
		return l, fmt.Errorf("%w: descriptor: %w", ErrFormat, err)
	}
	if want != l {
		return l, fmt.Errorf("%w: descriptor %+v, the layout of its type and sizes is %+v", ErrFormat, l, want)
	}
	if uint64(len(sym)) != probe.MapHdrSize+l.DataSize {
		return l, fmt.Errorf("%w: symbol has %d bytes, descriptor says %d", ErrFormat, len(sym), probe.MapHdrSize+l.DataSize)
	}
	return l, nil
}

// Encode is the inverse of Decode (tests and tools build files with it).
func Encode(f *File) []byte {
	le := binary.LittleEndian
	b := make([]byte, HeaderSize)
	copy(b, Magic)
	le.PutUint32(b[8:], Version)
	le.PutUint32(b[12:], f.PID)
	le.PutUint32(b[16:], f.Image)
	le.PutUint32(b[20:], uint32(len(f.Maps)))
	le.PutUint64(b[24:], f.Seq)
	le.PutUint64(b[32:], f.TimeNs)
	le.PutUint32(b[40:], f.Tenant)
	if f.Final {
		le.PutUint32(b[44:], 1)
	}
	for _, m := range f.Maps {
		h := make([]byte, NameSize+8)
		copy(h[:NameSize-1], m.Name)
		if m.Present {
			le.PutUint64(h[NameSize:], uint64(len(m.Bytes)))
		}
		b = append(b, h...)
		if m.Present {
			b = append(b, m.Bytes...)
			b = append(b, make([]byte, (8-len(m.Bytes)%8)%8)...)
		}
	}
	return b
}

// image views the map through the device map specification of devrt/probe/ptx.
func (m Map) image() *ptx.Image { return &ptx.Image{Layout: m.Layout, Bytes: m.Bytes} }

// Entries decodes the map: every index of an array, the live keys of a
// hash, every index of a per-warp array summed over the warp slots (as
// little-endian u64 words), the records of a ringbuf keyed by sequence.
func (m Map) Entries() ([]ptx.Entry, error) {
	if !m.Present {
		return nil, nil
	}
	return m.image().Entries()
}

// Counters returns the u64 values of an array or per-warp map of 8-byte
// values, by index (per-warp: summed over the warp slots).
func (m Map) Counters() ([]uint64, error) {
	if !m.Present {
		return nil, nil
	}
	if (m.Layout.Type != probe.MapArray && m.Layout.Type != probe.MapPerWarp) || m.Layout.ValueSize != 8 {
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
	if m.Layout.Type != probe.MapRingbuf {
		return nil, 0, fmt.Errorf("map %q: a %s map is not a ringbuf", m.Name, m.Layout.Type)
	}
	ents, err := m.Entries()
	if err != nil {
		return nil, 0, fmt.Errorf("map %q: %w", m.Name, err)
	}
	for _, e := range ents {
		records = append(records, e.Value)
	}
	return records, binary.LittleEndian.Uint64(m.Bytes[probe.MapHdrSize+8:]), nil
}
