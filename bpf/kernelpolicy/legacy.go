package kernelpolicy

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
)

// Objects whose ops are in the legacy ".struct_ops" section (libbpf's
// older spelling, which gpu_ext's policies use) are read as if they were in
// ".struct_ops.link": cilium/ebpf v0.22 refuses the legacy section, and a C
// header cannot rename a section (SEC takes a string literal, which the
// preprocessor cannot compare).  The two spellings describe the same ops;
// the legacy one only means "registered by a map update, without a link",
// and gpuext's loader always attaches through a link that it pins.  So the
// object is rewritten in memory: the section and its BTF datasec get the
// name ".struct_ops.link" (both names are appended to their string tables,
// which then move to the end of the file); nothing else changes.

const (
	legacyOpsSec = ".struct_ops"
	linkOpsSec   = ".struct_ops.link"
)

// errLegacy is wrapped by what legacyAsLink cannot rewrite.
var errLegacy = errors.New("legacy .struct_ops object")

// legacyAsLink returns data with its .struct_ops section renamed to
// .struct_ops.link, and whether it had one.  Only 64-bit objects (all BPF
// objects) are rewritten.
func legacyAsLink(data []byte) ([]byte, bool, error) {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, false, err
	}
	ops := f.Section(legacyOpsSec)
	if ops == nil {
		return data, false, nil
	}
	if f.Section(linkOpsSec) != nil {
		return nil, true, fmt.Errorf("%w: it has both %s and %s", errLegacy, legacyOpsSec, linkOpsSec)
	}
	if f.Class != elf.ELFCLASS64 {
		return nil, true, fmt.Errorf("%w: %s object, only 64-bit ones are read", errLegacy, f.Class)
	}
	bo := f.ByteOrder
	hdr := data[:64]
	shoff := bo.Uint64(hdr[0x28:])
	shentsize := uint64(bo.Uint16(hdr[0x3a:]))
	shstrndx := int(bo.Uint16(hdr[0x3e:]))
	if shentsize < 64 || shstrndx >= len(f.Sections) {
		return nil, true, fmt.Errorf("%w: unexpected section header layout", errLegacy)
	}
	btfSec := f.Section(".BTF")
	if btfSec == nil {
		return nil, true, fmt.Errorf("%w: no .BTF section (build with -g)", errLegacy)
	}
	shstr, err := f.Sections[shstrndx].Data()
	if err != nil {
		return nil, true, err
	}
	btfData, err := btfSec.Data()
	if err != nil {
		return nil, true, err
	}
	newBTF, err := renameDatasec(btfData, bo, legacyOpsSec, linkOpsSec)
	if err != nil {
		return nil, true, fmt.Errorf("%w: %v", errLegacy, err)
	}

	out := append([]byte(nil), data...)
	appendAligned := func(b []byte) uint64 {
		for len(out)%8 != 0 {
			out = append(out, 0)
		}
		off := uint64(len(out))
		out = append(out, b...)
		return off
	}
	// The section header table may sit before the data appended below; it is patched in place.
	shdr := func(i int) []byte { o := shoff + uint64(i)*shentsize; return out[o : o+shentsize] }

	nameOff := uint32(len(shstr))
	strOff := appendAligned(append(append(append([]byte(nil), shstr...), linkOpsSec...), 0))
	btfOff := appendAligned(newBTF)
	for i, s := range f.Sections {
		h := shdr(i)
		switch {
		case i == shstrndx:
			bo.PutUint64(h[0x18:], strOff)
			bo.PutUint64(h[0x20:], uint64(len(shstr)+len(linkOpsSec)+1))
		case s == ops:
			bo.PutUint32(h[0x00:], nameOff)
		case s == btfSec:
			bo.PutUint64(h[0x18:], btfOff)
			bo.PutUint64(h[0x20:], uint64(len(newBTF)))
		}
	}
	return out, true, nil
}

// renameDatasec returns raw BTF in which the DATASEC named from is named
// to: the string is appended to the string section, the types are kept.
func renameDatasec(raw []byte, bo binary.ByteOrder, from, to string) ([]byte, error) {
	if len(raw) < 24 || bo.Uint16(raw) != 0xeb9f {
		return nil, errors.New("BTF: bad header")
	}
	hdrLen := bo.Uint32(raw[4:])
	typeOff, typeLen := bo.Uint32(raw[8:]), bo.Uint32(raw[12:])
	strOff, strLen := bo.Uint32(raw[16:]), bo.Uint32(raw[20:])
	end := func(off, n uint32) uint64 { return uint64(hdrLen) + uint64(off) + uint64(n) }
	if hdrLen < 24 || end(typeOff, typeLen) > uint64(len(raw)) || end(strOff, strLen) > uint64(len(raw)) {
		return nil, errors.New("BTF: sections outside the data")
	}
	types := append([]byte(nil), raw[hdrLen+typeOff:hdrLen+typeOff+typeLen]...)
	strs := raw[hdrLen+strOff : hdrLen+strOff+strLen]
	str := func(off uint32) string {
		if off >= uint32(len(strs)) {
			return ""
		}
		s := strs[off:]
		if i := bytes.IndexByte(s, 0); i >= 0 {
			s = s[:i]
		}
		return string(s)
	}
	const kindDatasec = 15
	found := false
	for p := 0; p+12 <= len(types); {
		info := bo.Uint32(types[p+4:])
		kind, vlen := (info>>24)&0x1f, int(info&0xffff)
		if kind == kindDatasec && str(bo.Uint32(types[p:])) == from {
			bo.PutUint32(types[p:], strLen)
			found = true
		}
		p += 12
		switch kind {
		case 1, 14, 17: // INT, VAR, DECL_TAG
			p += 4
		case 3: // ARRAY
			p += 12
		case 4, 5, 15, 19: // STRUCT, UNION, DATASEC, ENUM64
			p += 12 * vlen
		case 6, 13: // ENUM, FUNC_PROTO
			p += 8 * vlen
		case 2, 7, 8, 9, 10, 11, 12, 16, 18: // no data after the type
		default:
			return nil, fmt.Errorf("BTF: unknown kind %d", kind)
		}
	}
	if !found {
		return nil, fmt.Errorf("BTF: no datasec %s", from)
	}
	out := make([]byte, 24, 24+len(types)+len(strs)+len(to)+1)
	copy(out, raw[:24])
	bo.PutUint32(out[4:], 24)
	bo.PutUint32(out[8:], 0)
	bo.PutUint32(out[12:], uint32(len(types)))
	bo.PutUint32(out[16:], uint32(len(types)))
	bo.PutUint32(out[20:], strLen+uint32(len(to))+1)
	out = append(out, types...)
	out = append(out, strs...)
	out = append(out, to...)
	return append(out, 0), nil
}
