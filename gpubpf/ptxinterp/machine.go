package ptxinterp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Address windows. A state-space address (what mov of a symbol gives, what
// ld.global/ld.local take) is an offset in its window; cvta adds the
// window's generic base. Generic accesses resolve by range, so a missing
// cvta or a stray pointer faults instead of reading something.
const (
	genericGlobal = 0x0000_1000_0000_0000
	genericLocal  = 0x0000_2000_0000_0000
	genericAlloc  = 0x0000_3000_0000_0000
	windowBase    = 0x1000 // first state-space address of a window
	localSize     = 1 << 20
)

// DefaultStepLimit bounds the instructions one Call executes.
const DefaultStepLimit = 1 << 20

// ErrStepLimit is wrapped by the error of a run that exceeds the budget.
var ErrStepLimit = errors.New("step limit exceeded")

// ThreadRegs are the special registers of the thread a Call runs as.
type ThreadRegs struct {
	Tid, Ctaid, Ntid, Nctaid [3]uint32
	LaneID                   uint32 // %laneid
	WarpID                   uint32 // %warpid (hardware warp slot on the SM)
	SMID                     uint32 // %smid
	Globaltimer              uint64 // %globaltimer
	// GlobaltimerStep is added to Globaltimer after each read of
	// %globaltimer (0: the timer stands still during the call), so a
	// kernel run as one Call sees time pass between its entry and exit.
	GlobaltimerStep uint64
}

// Thread0 is thread (0,0,0) of block (0,0,0) of a 1x1 launch.
func Thread0() ThreadRegs {
	return ThreadRegs{Ntid: [3]uint32{1, 1, 1}, Nctaid: [3]uint32{1, 1, 1}}
}

type global struct {
	name string
	off  uint64 // window address
	size uint64
}

// Machine is a loaded PTX module and its memory.
type Machine struct {
	// StepLimit bounds the instructions of one Call (DefaultStepLimit).
	StepLimit int

	funcs    map[string]*function
	globals  map[string]*global
	gmem     []byte // global window, from windowBase
	lmem     []byte // local window, from windowBase
	lsp      uint64
	allocs   []allocation
	nextHeap uint64
	steps    int
	thread   ThreadRegs
}

type allocation struct {
	addr uint64
	b    []byte
}

// Load parses a PTX module.
func Load(src string) (*Machine, error) {
	m := &Machine{
		StepLimit: DefaultStepLimit,
		funcs:     map[string]*function{},
		globals:   map[string]*global{},
		lmem:      make([]byte, localSize),
		lsp:       windowBase,
		nextHeap:  genericAlloc + 0x1000,
	}
	if err := m.parse(src); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Machine) addGlobal(line int, mm []string) error {
	name := mm[6]
	if _, dup := m.globals[name]; dup {
		return fmt.Errorf("line %d: global %s defined twice", line, name)
	}
	bits, err := typeBits(mm[4] + mm[5])
	if err != nil || bits < 8 {
		return fmt.Errorf("line %d: global %s: bad type", line, name)
	}
	n := uint64(1)
	if mm[7] != "" {
		n, _ = strconv.ParseUint(mm[7], 10, 64)
	}
	size := n * uint64(bits/8)
	align := uint64(bits / 8)
	if mm[3] != "" {
		align, _ = strconv.ParseUint(mm[3], 10, 64)
	}
	off := uint64(len(m.gmem))
	off = (off + align - 1) &^ (align - 1)
	if off < 64 {
		off = 64
	}
	m.gmem = append(m.gmem, make([]byte, off+size-uint64(len(m.gmem)))...)
	g := &global{name: name, off: windowBase + off, size: size}
	m.globals[name] = g
	var init []string
	if mm[8] != "" {
		init = strings.Split(mm[8], ",")
	} else if mm[9] != "" {
		init = []string{mm[9]}
	}
	if uint64(len(init)) > n {
		return fmt.Errorf("line %d: global %s: %d initialisers for %d elements", line, name, len(init), n)
	}
	for i, s := range init {
		v, err := parseImm(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("line %d: global %s: %w", line, name, err)
		}
		putN(m.gmem[off+uint64(i)*uint64(bits/8):], bits/8, v)
	}
	return nil
}

func parseImm(s string) (uint64, error) {
	s = strings.TrimSuffix(s, "U")
	neg := strings.HasPrefix(s, "-")
	t := strings.TrimPrefix(s, "-")
	var v uint64
	var err error
	if strings.HasPrefix(t, "0x") || strings.HasPrefix(t, "0X") {
		v, err = strconv.ParseUint(t[2:], 16, 64)
	} else {
		v, err = strconv.ParseUint(t, 10, 64) // beyond .s64: a .u64 literal
		if err == nil && neg && v > 1<<63 {
			err = fmt.Errorf("negative literal beyond int64")
		}
	}
	if err != nil {
		return 0, fmt.Errorf("immediate %q: %w", s, err)
	}
	if neg {
		v = -v
	}
	return v, nil
}

func putN(b []byte, n int, v uint64) {
	switch n {
	case 1:
		b[0] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(b, uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(v))
	case 8:
		binary.LittleEndian.PutUint64(b, v)
	}
}

func getN(b []byte, n int) uint64 {
	switch n {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	}
	return binary.LittleEndian.Uint64(b)
}

// Alloc copies b into a fresh buffer and returns its generic address. The
// buffer is global memory: cvta.to.global of that address, then ld.global
// or st.global, reach the same bytes.
func (m *Machine) Alloc(b []byte) uint64 {
	a := allocation{addr: m.nextHeap, b: append([]byte(nil), b...)}
	m.allocs = append(m.allocs, a)
	m.nextHeap += (uint64(len(b)) + 0x1fff) &^ 0xfff // a gap after each
	return a.addr
}

// Global is the live memory of a global symbol (nil if there is none):
// writes to it are seen by the next Call.
func (m *Machine) Global(sym string) []byte {
	g, ok := m.globals[sym]
	if !ok {
		return nil
	}
	o := g.off - windowBase
	return m.gmem[o : o+g.size : o+g.size]
}

// GlobalAddr is the generic address of a global symbol.
func (m *Machine) GlobalAddr(sym string) (uint64, bool) {
	g, ok := m.globals[sym]
	if !ok {
		return 0, false
	}
	return genericGlobal + g.off, true
}

// Functions lists the functions and entries the module defines.
func (m *Machine) Functions() []string {
	var out []string
	for n, f := range m.funcs {
		if f.defined {
			out = append(out, n)
		}
	}
	return out
}

// Read copies n bytes at a generic address.
func (m *Machine) Read(addr uint64, n int) ([]byte, error) {
	b, err := m.mem(addr, n, spaceGeneric)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), b...), nil
}

// Write copies b to a generic address.
func (m *Machine) Write(addr uint64, b []byte) error {
	d, err := m.mem(addr, len(b), spaceGeneric)
	if err != nil {
		return err
	}
	copy(d, b)
	return nil
}

type space int

const (
	spaceGeneric space = iota
	spaceGlobal
	spaceLocal
)

// mem resolves n bytes at addr in a state space to live memory.
func (m *Machine) mem(addr uint64, n int, sp space) ([]byte, error) {
	if sp == spaceGeneric {
		switch {
		case addr >= genericGlobal && addr < genericLocal:
			return m.mem(addr-genericGlobal, n, spaceGlobal)
		case addr >= genericLocal && addr < genericAlloc:
			return m.mem(addr-genericLocal, n, spaceLocal)
		case addr >= genericAlloc:
			for _, a := range m.allocs {
				if addr >= a.addr && addr+uint64(n) <= a.addr+uint64(len(a.b)) {
					return a.b[addr-a.addr : addr-a.addr+uint64(n)], nil
				}
			}
		}
		return nil, fmt.Errorf("generic address %#x (+%d) is not mapped", addr, n)
	}
	if sp == spaceGlobal && addr >= genericAlloc-genericGlobal {
		// a buffer of Alloc (global memory a host allocated) through
		// cvta.to.global: the same bytes as at its generic address
		return m.mem(addr+genericGlobal, n, spaceGeneric)
	}
	var w []byte
	hi := uint64(0)
	name := "global"
	if sp == spaceGlobal {
		w, hi = m.gmem, windowBase+uint64(len(m.gmem))
	} else {
		w, hi, name = m.lmem, m.lsp, "local"
	}
	if addr < windowBase || addr+uint64(n) > hi || addr+uint64(n) < addr {
		return nil, fmt.Errorf("%s address %#x (+%d) is not mapped", name, addr, n)
	}
	if sp == spaceGlobal {
		inside := false
		for _, g := range m.globals {
			inside = inside || (addr >= g.off && addr+uint64(n) <= g.off+g.size)
		}
		if !inside {
			return nil, fmt.Errorf("global address %#x (+%d) is not inside one symbol", addr, n)
		}
	}
	return w[addr-windowBase : addr-windowBase+uint64(n)], nil
}
