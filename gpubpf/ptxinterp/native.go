package ptxinterp

import (
	"encoding/binary"
	"fmt"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/devmap"
)

// native runs a helper-library function the module declares but does not
// define, per the device map operations of gpubpf/devmap.
func (m *Machine) native(f *function, args [][]byte) ([]byte, error) {
	arg := func(i int) uint64 { return binary.LittleEndian.Uint64(args[i]) }
	want := func(n int) error {
		if len(args) != n || f.ret == nil || f.ret.size != 8 {
			return fmt.Errorf("%s: prototype is not (.param .b64) with %d .b64 arguments", f.name, n)
		}
		for _, a := range args {
			if len(a) != 8 {
				return fmt.Errorf("%s: arguments must be .b64", f.name)
			}
		}
		return nil
	}
	out := make([]byte, 8)
	var r int64
	switch f.name {
	case abi.FuncMapLookup, abi.FuncMapDelete:
		if err := want(2); err != nil {
			return nil, err
		}
		im, base, err := m.mapImage(arg(0))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
		key, err := m.Read(arg(1), int(im.Layout.KeySize))
		if err != nil {
			return nil, fmt.Errorf("%s: key: %w", f.name, err)
		}
		if f.name == abi.FuncMapDelete {
			r = im.Delete(key)
		} else if off := im.Lookup(key, devmap.Slot(m.thread.SMID, m.thread.WarpID)); off != 0 {
			r = int64(base + off)
		}
	case abi.FuncMapUpdate:
		if err := want(4); err != nil {
			return nil, err
		}
		im, _, err := m.mapImage(arg(0))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
		key, err := m.Read(arg(1), int(im.Layout.KeySize))
		if err != nil {
			return nil, fmt.Errorf("%s: key: %w", f.name, err)
		}
		val, err := m.Read(arg(2), int(im.Layout.ValueSize))
		if err != nil {
			return nil, fmt.Errorf("%s: value: %w", f.name, err)
		}
		r = im.Update(key, val, arg(3), devmap.Slot(m.thread.SMID, m.thread.WarpID))
	case abi.FuncRingbufOut:
		if err := want(4); err != nil {
			return nil, err
		}
		im, _, err := m.mapImage(arg(0))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
		size := arg(2)
		if size > uint64(im.Layout.MaxEntries) {
			r = -devmap.EAGAIN
			break
		}
		data, err := m.Read(arg(1), int(size))
		if err != nil {
			return nil, fmt.Errorf("%s: data: %w", f.name, err)
		}
		r = im.RingbufOutput(data, arg(3))
	default:
		return nil, fmt.Errorf("call to %s: declared, not defined, and not a helper-library function", f.name)
	}
	binary.LittleEndian.PutUint64(out, uint64(r))
	return out, nil
}

// mapImage reads the descriptor at a map's generic address and returns a
// live view of the whole symbol.
func (m *Machine) mapImage(addr uint64) (*devmap.Image, uint64, error) {
	hdr, err := m.mem(addr, abi.MapHdrSize, spaceGeneric)
	if err != nil {
		return nil, 0, fmt.Errorf("map descriptor: %w", err)
	}
	le := binary.LittleEndian
	l := abi.MapLayout{
		Type:       abi.MapType(le.Uint32(hdr[0:])),
		KeySize:    le.Uint32(hdr[4:]),
		ValueSize:  le.Uint32(hdr[8:]),
		MaxEntries: le.Uint32(hdr[12:]),
		NBuckets:   le.Uint32(hdr[16:]),
		Stride:     le.Uint32(hdr[20:]),
		DataSize:   le.Uint64(hdr[24:]),
	}
	want, err := abi.Layout(l.Type, l.KeySize, l.ValueSize, l.MaxEntries)
	if err != nil || want != l {
		return nil, 0, fmt.Errorf("map descriptor at %#x is not a valid device map (%+v)", addr, l)
	}
	b, err := m.mem(addr, abi.MapHdrSize+int(l.DataSize), spaceGeneric)
	if err != nil {
		return nil, 0, fmt.Errorf("map data: %w", err)
	}
	return &devmap.Image{Layout: l, Bytes: b}, addr, nil
}
