package ptxinterp

import (
	"fmt"
	"math/bits"
	"strings"
)

type frame struct {
	fn     *function
	regs   map[string]uint64
	params map[string][]byte
	locals map[string]uint64 // local window address
}

// Call runs a function or entry as one thread. args fill the parameters
// in order (each as a little-endian value of the parameter's size); the
// result is the return parameter (0 if the function has none).
func (m *Machine) Call(fn string, thread ThreadRegs, args ...uint64) (uint64, error) {
	f, ok := m.funcs[fn]
	if !ok {
		return 0, fmt.Errorf("no function %s", fn)
	}
	if len(args) != len(f.params) {
		return 0, fmt.Errorf("%s takes %d arguments, got %d", fn, len(f.params), len(args))
	}
	m.thread = thread
	m.steps = 0
	var in [][]byte
	for i, p := range f.params {
		b := make([]byte, p.size)
		putN(b, p.size, args[i])
		in = append(in, b)
	}
	ret, err := m.invoke(f, in)
	if err != nil {
		return 0, err
	}
	if ret == nil {
		return 0, nil
	}
	return getN(ret, len(ret)), nil
}

func (m *Machine) invoke(f *function, args [][]byte) ([]byte, error) {
	if !f.defined {
		return m.native(f, args)
	}
	fr := &frame{fn: f, regs: map[string]uint64{}, params: map[string][]byte{}, locals: map[string]uint64{}}
	for i, p := range f.params {
		fr.params[p.name] = append([]byte(nil), args[i]...)
	}
	if f.ret != nil {
		fr.params[f.ret.name] = make([]byte, f.ret.size)
	}
	saved := m.lsp
	defer func() { m.lsp = saved }()
	for _, l := range f.locals {
		a := uint64(l.align)
		if a == 0 {
			a = 1
		}
		m.lsp = (m.lsp + a - 1) &^ (a - 1)
		if m.lsp+uint64(l.size) > windowBase+localSize {
			return nil, fmt.Errorf("%s: local memory exhausted", f.name)
		}
		fr.locals[l.name] = m.lsp
		// Poison: a read of a local the code never wrote shows up.
		b := m.lmem[m.lsp-windowBase : m.lsp-windowBase+uint64(l.size)]
		for i := range b {
			b[i] = 0xcd
		}
		m.lsp += uint64(l.size)
	}
	for pc := 0; pc < len(f.body); {
		in := f.body[pc]
		pc++
		m.steps++
		if m.steps > m.StepLimit {
			return nil, fmt.Errorf("%s line %d: %w (%d)", f.name, in.line, ErrStepLimit, m.StepLimit)
		}
		if in.declParam != nil {
			fr.params[in.declParam.name] = make([]byte, in.declParam.size)
			continue
		}
		if in.pred != "" {
			v, err := fr.reg(in.pred, 1)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", in.line, err)
			}
			if (v != 0) == in.predNeg {
				continue
			}
		}
		next, done, err := m.step(fr, in)
		if err != nil {
			return nil, fmt.Errorf("line %d: %s: %w", in.line, in.text, err)
		}
		if done {
			if f.ret != nil {
				return fr.params[f.ret.name], nil
			}
			return nil, nil
		}
		if next >= 0 {
			pc = next
		}
	}
	return nil, fmt.Errorf("%s: fell off the end of the body", f.name)
}

func (fr *frame) reg(name string, bits int) (uint64, error) {
	b, ok := fr.fn.regs[name]
	if !ok {
		return 0, fmt.Errorf("undeclared register %s", name)
	}
	if b != bits {
		return 0, fmt.Errorf("register %s is %d bits, the instruction wants %d", name, b, bits)
	}
	return fr.regs[name], nil
}

func (fr *frame) set(name string, bits int, v uint64) error {
	b, ok := fr.fn.regs[name]
	if !ok {
		return fmt.Errorf("undeclared register %s", name)
	}
	if b != bits {
		return fmt.Errorf("register %s is %d bits, the instruction wants %d", name, b, bits)
	}
	fr.regs[name] = trunc(v, bits)
	return nil
}

func trunc(v uint64, bits int) uint64 {
	if bits >= 64 {
		return v
	}
	if bits == 1 {
		return v & 1
	}
	return v & (1<<bits - 1)
}

func sext(v uint64, bits int) uint64 {
	if bits >= 64 {
		return v
	}
	s := 64 - uint(bits)
	return uint64(int64(v<<s) >> s)
}

// special reads a special register; ok is false when name is not one.
func (m *Machine) special(name string) (uint64, int, bool) {
	t := &m.thread
	dims := map[string]*[3]uint32{"%tid": &t.Tid, "%ctaid": &t.Ctaid, "%ntid": &t.Ntid, "%nctaid": &t.Nctaid}
	if base, c, ok := strings.Cut(name, "."); ok {
		if d, ok := dims[base]; ok {
			if i := strings.Index("xyz", c); len(c) == 1 && i >= 0 {
				return uint64(d[i]), 32, true
			}
		}
		return 0, 0, false
	}
	switch name {
	case "%laneid":
		return uint64(t.LaneID), 32, true
	case "%lanemask_lt":
		return uint64(1)<<(t.LaneID%32) - 1, 32, true
	case "%warpid":
		return uint64(t.WarpID), 32, true
	case "%smid":
		return uint64(t.SMID), 32, true
	case "%globaltimer":
		v := t.Globaltimer
		t.Globaltimer += t.GlobaltimerStep
		return v, 64, true
	}
	return 0, 0, false
}

// src evaluates a source operand at the instruction's width. relaxed
// allows a register wider than bits (ld/st/cvt); the value is truncated.
func (m *Machine) src(fr *frame, a string, bits int, relaxed bool) (uint64, error) {
	if strings.HasPrefix(a, "%") {
		if v, w, ok := m.special(a); ok {
			if w != bits && !(relaxed && w > bits) {
				return 0, fmt.Errorf("special register %s is %d bits, the instruction wants %d", a, w, bits)
			}
			return trunc(v, bits), nil
		}
		b, ok := fr.fn.regs[a]
		if !ok {
			return 0, fmt.Errorf("undeclared register %s", a)
		}
		if relaxed && b > bits {
			return trunc(fr.regs[a], bits), nil
		}
		return fr.reg(a, bits)
	}
	if a != "" && (a[0] == '-' || (a[0] >= '0' && a[0] <= '9')) {
		v, err := parseImm(a)
		return trunc(v, bits), err
	}
	if l, ok := fr.locals[a]; ok {
		return l, nil
	}
	if g, ok := m.globals[a]; ok {
		return g.off, nil
	}
	return 0, fmt.Errorf("operand %q: not a register, immediate or symbol", a)
}

// dst writes a destination register; relaxed allows a wider register,
// which gets the value extended (signed: sign-extended).
func (m *Machine) dst(fr *frame, a string, bits int, signed, relaxed bool, v uint64) error {
	b, ok := fr.fn.regs[a]
	if !ok {
		return fmt.Errorf("undeclared destination %s", a)
	}
	if relaxed && b > bits {
		v = trunc(v, bits)
		if signed {
			v = sext(v, bits)
		}
		fr.regs[a] = trunc(v, b)
		return nil
	}
	return fr.set(a, bits, v)
}

type typ struct {
	kind byte // 'u', 's', 'b', 'p'
	bits int
}

func parseType(s string) (typ, bool) {
	if s == "pred" {
		return typ{'p', 1}, true
	}
	b, err := typeBits(s)
	if err != nil {
		return typ{}, false
	}
	return typ{s[0], b}, true
}

// lastType is the instruction's (last) type modifier.
func lastType(in *instr) (typ, error) {
	for i := len(in.mods) - 1; i >= 0; i-- {
		if t, ok := parseType(in.mods[i]); ok {
			return t, nil
		}
	}
	return typ{}, fmt.Errorf("no type")
}

func hasMod(in *instr, mod string) bool {
	for _, x := range in.mods {
		if x == mod {
			return true
		}
	}
	return false
}

func (m *Machine) want(in *instr, n int) error {
	if len(in.args) != n {
		return fmt.Errorf("%d operands, want %d", len(in.args), n)
	}
	return nil
}

// address resolves [base+off] to a state space address or a .param buffer.
func (m *Machine) address(fr *frame, a string) (base string, addr uint64, err error) {
	if !strings.HasPrefix(a, "[") || !strings.HasSuffix(a, "]") {
		return "", 0, fmt.Errorf("address %q", a)
	}
	a = a[1 : len(a)-1]
	var off uint64
	if i := strings.IndexByte(a, '+'); i > 0 {
		if off, err = parseImm(strings.TrimSpace(a[i+1:])); err != nil {
			return "", 0, err
		}
		a = strings.TrimSpace(a[:i])
	}
	if strings.HasPrefix(a, "%") {
		v, err := fr.reg(a, 64)
		return "", v + off, err
	}
	if _, ok := fr.params[a]; ok {
		return a, off, nil
	}
	v, err := m.src(fr, a, 64, false)
	return "", v + off, err
}

func stateSpace(in *instr) (space, string) {
	for _, x := range in.mods {
		switch x {
		case "global":
			return spaceGlobal, x
		case "local":
			return spaceLocal, x
		case "param":
			return spaceGeneric, x
		}
	}
	return spaceGeneric, ""
}

// access is the memory of an ld/st/atom operand.
func (m *Machine) access(fr *frame, in *instr, a string, n int) ([]byte, error) {
	sp, name := stateSpace(in)
	base, addr, err := m.address(fr, a)
	if err != nil {
		return nil, err
	}
	if name == "param" {
		p, ok := fr.params[base]
		if base == "" || !ok {
			return nil, fmt.Errorf("%s is not a parameter", a)
		}
		if addr+uint64(n) > uint64(len(p)) {
			return nil, fmt.Errorf("parameter %s: %d bytes at %d beyond its %d", base, n, addr, len(p))
		}
		return p[addr : addr+uint64(n)], nil
	}
	if base != "" {
		return nil, fmt.Errorf("parameter %s accessed without .param", base)
	}
	if addr == 0 {
		return nil, fmt.Errorf("null address")
	}
	if addr%uint64(n) != 0 {
		return nil, fmt.Errorf("address %#x is not aligned to %d", addr, n)
	}
	return m.mem(addr, n, sp)
}

// step executes one instruction: next >= 0 is a branch target, done a return.
func (m *Machine) step(fr *frame, in *instr) (next int, done bool, err error) {
	next = -1
	switch in.op {
	case "ret", "exit":
		return -1, true, nil
	case "bra":
		if err := m.want(in, 1); err != nil {
			return 0, false, err
		}
		return fr.fn.labels[in.args[0]], false, nil
	case "call":
		return -1, false, m.call(fr, in)
	case "membar":
		// threads run one at a time here: every store is seen in order
		if len(in.args) != 0 || len(in.mods) != 1 || (in.mods[0] != "cta" && in.mods[0] != "gl" && in.mods[0] != "sys") {
			return 0, false, fmt.Errorf("membar%s", strings.Join(append([]string{""}, in.mods...), "."))
		}
		return -1, false, nil
	}
	t, err := lastType(in)
	if err != nil {
		return 0, false, err
	}
	a := in.args
	switch in.op {
	case "mov":
		if err := m.want(in, 2); err != nil {
			return 0, false, err
		}
		v, err := m.src(fr, a[1], t.bits, false)
		if err != nil {
			return 0, false, err
		}
		return -1, false, m.dst(fr, a[0], t.bits, false, false, v)
	case "cvta":
		if err := m.want(in, 2); err != nil {
			return 0, false, err
		}
		v, err := m.src(fr, a[1], 64, false)
		if err != nil {
			return 0, false, err
		}
		to := hasMod(in, "to")
		var base uint64
		switch {
		case hasMod(in, "global"):
			base = genericGlobal
		case hasMod(in, "local"):
			base = genericLocal
		default:
			return 0, false, fmt.Errorf("cvta to/from an unsupported space")
		}
		if to {
			v -= base
		} else {
			v += base
		}
		return -1, false, m.dst(fr, a[0], 64, false, false, v)
	case "cvt":
		if err := m.want(in, 2); err != nil {
			return 0, false, err
		}
		if len(in.mods) != 2 {
			return 0, false, fmt.Errorf("cvt wants two types")
		}
		dt, ok1 := parseType(in.mods[0])
		st, ok2 := parseType(in.mods[1])
		if !ok1 || !ok2 || dt.kind == 'p' || st.kind == 'p' {
			return 0, false, fmt.Errorf("cvt types")
		}
		v, err := m.src(fr, a[1], st.bits, true)
		if err != nil {
			return 0, false, err
		}
		if st.kind == 's' {
			v = sext(v, st.bits)
		}
		return -1, false, m.dst(fr, a[0], dt.bits, dt.kind == 's', true, trunc(v, dt.bits))
	case "ld":
		if err := m.want(in, 2); err != nil {
			return 0, false, err
		}
		mem, err := m.access(fr, in, a[1], t.bits/8)
		if err != nil {
			return 0, false, err
		}
		return -1, false, m.dst(fr, a[0], t.bits, t.kind == 's', true, getN(mem, t.bits/8))
	case "st":
		if err := m.want(in, 2); err != nil {
			return 0, false, err
		}
		v, err := m.src(fr, a[1], t.bits, true)
		if err != nil {
			return 0, false, err
		}
		mem, err := m.access(fr, in, a[0], t.bits/8)
		if err != nil {
			return 0, false, err
		}
		putN(mem, t.bits/8, v)
		return -1, false, nil
	case "atom":
		return -1, false, m.atom(fr, in, t)
	case "red":
		return -1, false, m.red(fr, in, t)
	case "setp":
		if err := m.want(in, 3); err != nil {
			return 0, false, err
		}
		x, err := m.src(fr, a[1], t.bits, false)
		if err != nil {
			return 0, false, err
		}
		y, err := m.src(fr, a[2], t.bits, false)
		if err != nil {
			return 0, false, err
		}
		r, err := compare(in.mods[0], t, x, y)
		if err != nil {
			return 0, false, err
		}
		return -1, false, fr.set(a[0], 1, r)
	}
	// Warp-wide instructions, as one thread alone in its warp sees them
	// (the machine runs a launch's threads one after another): the active
	// mask, a match and a shuffle hold only the thread's own lane.
	switch in.op {
	case "activemask":
		if err := m.want(in, 1); err != nil {
			return 0, false, err
		}
		return -1, false, m.dst(fr, a[0], 32, false, false, uint64(1)<<(m.thread.LaneID%32))
	case "match", "shfl":
		n := map[string]int{"match": 3, "shfl": 5}[in.op]
		if err := m.want(in, n); err != nil {
			return 0, false, err
		}
		if !hasMod(in, "sync") || (in.op == "match" && !hasMod(in, "any")) || (in.op == "shfl" && !hasMod(in, "idx")) {
			return 0, false, fmt.Errorf("only match.any.sync and shfl.sync.idx")
		}
		own := uint64(1) << (m.thread.LaneID % 32)
		mask, err := m.src(fr, a[n-1], 32, false)
		if err != nil {
			return 0, false, err
		}
		if mask&own == 0 {
			return 0, false, fmt.Errorf("%s: member mask %#x leaves out the thread's own lane %d", in.op, mask, m.thread.LaneID%32)
		}
		if in.op == "match" {
			return -1, false, m.dst(fr, a[0], 32, false, false, own)
		}
		lane, err := m.src(fr, a[2], 32, false)
		if err != nil {
			return 0, false, err
		}
		if lane%32 != uint64(m.thread.LaneID%32) {
			return 0, false, fmt.Errorf("shfl from lane %d: another thread's register (not modelled)", lane%32)
		}
		v, err := m.src(fr, a[1], 32, false)
		if err != nil {
			return 0, false, err
		}
		return -1, false, m.dst(fr, a[0], 32, false, false, v)
	case "popc", "brev", "bfind":
		if err := m.want(in, 2); err != nil {
			return 0, false, err
		}
		if t.bits != 32 {
			return 0, false, fmt.Errorf("only %s.b32/.u32", in.op)
		}
		v, err := m.src(fr, a[1], 32, false)
		if err != nil {
			return 0, false, err
		}
		x := uint32(v)
		var r uint64
		switch in.op {
		case "popc":
			r = uint64(bits.OnesCount32(x))
		case "brev":
			r = uint64(bits.Reverse32(x))
		default:
			if t.kind != 'u' || !hasMod(in, "shiftamt") {
				return 0, false, fmt.Errorf("only bfind.shiftamt.u32")
			}
			r = 0xffffffff
			if x != 0 {
				r = uint64(bits.LeadingZeros32(x))
			}
		}
		return -1, false, m.dst(fr, a[0], 32, false, false, r)
	}
	// mul.wide.u32 d, a, b / mad.wide.u32 d, a, b, c: 32-bit sources, a
	// 64-bit product (and addend, and destination); the translator's
	// per-warp slot offset.
	if (in.op == "mul" || in.op == "mad") && hasMod(in, "wide") {
		if t.bits != 32 || t.kind != 'u' {
			return 0, false, fmt.Errorf("only %s.wide.u32", in.op)
		}
		if err := m.want(in, map[string]int{"mul": 3, "mad": 4}[in.op]); err != nil {
			return 0, false, err
		}
		x, err := m.src(fr, a[1], 32, false)
		if err != nil {
			return 0, false, err
		}
		y, err := m.src(fr, a[2], 32, false)
		if err != nil {
			return 0, false, err
		}
		r := x * y
		if in.op == "mad" {
			c, err := m.src(fr, a[3], 64, false)
			if err != nil {
				return 0, false, err
			}
			r += c
		}
		return -1, false, m.dst(fr, a[0], 64, false, false, r)
	}
	// Arithmetic: d, a[, b[, c]] all at the type's width, except shift
	// amounts (.u32).
	ops := make([]uint64, len(a)-1)
	for i := range ops {
		w := t.bits
		if (in.op == "shl" || in.op == "shr") && i == 1 {
			w = 32
		}
		if ops[i], err = m.src(fr, a[i+1], w, false); err != nil {
			return 0, false, err
		}
	}
	arity := map[string]int{"add": 2, "sub": 2, "mul": 2, "div": 2, "rem": 2, "and": 2, "or": 2, "xor": 2,
		"shl": 2, "shr": 2, "not": 1, "neg": 1, "mad": 3, "prmt": 3}[in.op]
	if len(ops) != arity {
		return 0, false, fmt.Errorf("%d source operands, want %d", len(ops), arity)
	}
	if t.kind == 'p' && in.op != "and" && in.op != "or" && in.op != "xor" && in.op != "not" {
		return 0, false, fmt.Errorf("%s on .pred", in.op)
	}
	var r uint64
	sx := func(v uint64) int64 { return int64(sext(v, t.bits)) }
	switch in.op {
	case "add":
		r = ops[0] + ops[1]
	case "sub":
		r = ops[0] - ops[1]
	case "mul", "mad":
		if !hasMod(in, "lo") {
			return 0, false, fmt.Errorf("only mul.lo/mad.lo")
		}
		r = ops[0] * ops[1]
		if in.op == "mad" {
			r += ops[2]
		}
	case "div", "rem":
		if trunc(ops[1], t.bits) == 0 {
			return 0, false, fmt.Errorf("integer division by zero (undefined in PTX)")
		}
		if t.kind == 's' {
			x, y := sx(ops[0]), sx(ops[1])
			if y == -1 && x == -1<<(t.bits-1) {
				return 0, false, fmt.Errorf("signed division overflow (undefined in PTX)")
			}
			if in.op == "div" {
				r = uint64(x / y)
			} else {
				r = uint64(x % y)
			}
		} else if in.op == "div" {
			r = ops[0] / ops[1]
		} else {
			r = ops[0] % ops[1]
		}
	case "and":
		r = ops[0] & ops[1]
	case "or":
		r = ops[0] | ops[1]
	case "xor":
		r = ops[0] ^ ops[1]
	case "not":
		r = ^ops[0]
	case "neg":
		r = -ops[0]
	case "shl":
		if ops[1] >= uint64(t.bits) {
			r = 0
		} else {
			r = ops[0] << ops[1]
		}
	case "shr":
		n := ops[1]
		if n > uint64(t.bits) {
			n = uint64(t.bits)
		}
		if t.kind == 's' {
			if n >= 64 {
				n = 63
			}
			r = uint64(sx(ops[0]) >> n)
		} else if n >= 64 {
			r = 0
		} else {
			r = ops[0] >> n
		}
	case "prmt":
		if t.bits != 32 || len(in.mods) != 1 {
			return 0, false, fmt.Errorf("only prmt.b32 (default mode)")
		}
		src := uint64(ops[0]) | uint64(ops[1])<<32
		for i := 0; i < 4; i++ {
			sel := (ops[2] >> (4 * i)) & 0xf
			b := (src >> (8 * (sel & 7))) & 0xff
			if sel&8 != 0 {
				if b&0x80 != 0 {
					b = 0xff
				} else {
					b = 0
				}
			}
			r |= b << (8 * i)
		}
	}
	if t.kind == 'p' {
		return -1, false, fr.set(a[0], 1, r&1)
	}
	return -1, false, m.dst(fr, a[0], t.bits, false, false, trunc(r, t.bits))
}

func compare(cmp string, t typ, x, y uint64) (uint64, error) {
	var r bool
	if t.kind == 's' {
		a, b := int64(sext(x, t.bits)), int64(sext(y, t.bits))
		switch cmp {
		case "eq":
			r = a == b
		case "ne":
			r = a != b
		case "lt":
			r = a < b
		case "le":
			r = a <= b
		case "gt":
			r = a > b
		case "ge":
			r = a >= b
		default:
			return 0, fmt.Errorf("compare %s", cmp)
		}
	} else {
		switch cmp {
		case "eq":
			r = x == y
		case "ne":
			r = x != y
		case "lt", "lo":
			r = x < y
		case "le", "ls":
			r = x <= y
		case "gt", "hi":
			r = x > y
		case "ge", "hs":
			r = x >= y
		default:
			return 0, fmt.Errorf("compare %s", cmp)
		}
	}
	if r {
		return 1, nil
	}
	return 0, nil
}

func (m *Machine) atom(fr *frame, in *instr, t typ) error {
	return m.rmw(fr, in, t, "atom", true)
}

// red: red.op.type [a], b - atom without the old value (and, so, without a
// destination operand).
func (m *Machine) red(fr *frame, in *instr, t typ) error {
	return m.rmw(fr, in, t, "red", false)
}

// rmw is atom (fetch: the old value goes to the first operand) and red.
func (m *Machine) rmw(fr *frame, in *instr, t typ, name string, fetch bool) error {
	var op string
	for _, x := range in.mods {
		switch x {
		case "add", "and", "or", "xor":
			op = x
		case "exch", "cas":
			if !fetch {
				return fmt.Errorf("%s modifier .%s", name, x)
			}
			op = x
		case "global", "u32", "u64", "b32", "b64", "s32", "s64":
		default:
			return fmt.Errorf("%s modifier .%s", name, x)
		}
	}
	if op == "" {
		return fmt.Errorf("%s without an operation", name)
	}
	if t.bits != 32 && t.bits != 64 {
		return fmt.Errorf("%s of %d bits", name, t.bits)
	}
	a := in.args
	if fetch {
		a = a[min(1, len(a)):]
	}
	n := 2
	if op == "cas" {
		n = 3
	}
	if len(a) != n || (fetch && len(in.args) != n+1) {
		return m.want(in, n+btoi(fetch))
	}
	mem, err := m.access(fr, in, a[0], t.bits/8)
	if err != nil {
		return err
	}
	b, err := m.src(fr, a[1], t.bits, false)
	if err != nil {
		return err
	}
	old := getN(mem, t.bits/8)
	var nv uint64
	switch op {
	case "add":
		nv = old + b
	case "and":
		nv = old & b
	case "or":
		nv = old | b
	case "xor":
		nv = old ^ b
	case "exch":
		nv = b
	case "cas":
		c, err := m.src(fr, a[2], t.bits, false)
		if err != nil {
			return err
		}
		nv = old
		if old == b {
			nv = c
		}
	}
	putN(mem, t.bits/8, nv)
	if !fetch {
		return nil
	}
	return m.dst(fr, in.args[0], t.bits, false, false, old)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// call: call[.uni] (ret), fn, (a, b); / call fn, (a); / call fn;
func (m *Machine) call(fr *frame, in *instr) error {
	for _, x := range in.mods {
		if x != "uni" {
			return fmt.Errorf("call modifier .%s", x)
		}
	}
	a := in.args
	var ret string
	if len(a) > 0 && strings.HasPrefix(a[0], "(") {
		ret = strings.TrimSpace(strings.Trim(a[0], "()"))
		a = a[1:]
	}
	if len(a) == 0 {
		return fmt.Errorf("call without a target")
	}
	f, ok := m.funcs[a[0]]
	if !ok {
		return fmt.Errorf("call to undeclared function %s", a[0])
	}
	if f.entry {
		return fmt.Errorf("call to an .entry")
	}
	var names []string
	if len(a) > 1 {
		if len(a) != 2 || !strings.HasPrefix(a[1], "(") {
			return fmt.Errorf("call arguments %v", a[1:])
		}
		for _, n := range strings.Split(strings.Trim(a[1], "()"), ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
	}
	if len(names) != len(f.params) {
		return fmt.Errorf("%s takes %d arguments, got %d", f.name, len(f.params), len(names))
	}
	var args [][]byte
	for i, n := range names {
		p, ok := fr.params[n]
		if !ok {
			return fmt.Errorf("argument %s is not a declared .param", n)
		}
		if len(p) != f.params[i].size {
			return fmt.Errorf("argument %s is %d bytes, %s wants %d", n, len(p), f.name, f.params[i].size)
		}
		args = append(args, p)
	}
	if (ret != "") != (f.ret != nil) {
		return fmt.Errorf("return value of %s: mismatch with its prototype", f.name)
	}
	out, err := m.invoke(f, args)
	if err != nil {
		return fmt.Errorf("in %s: %w", f.name, err)
	}
	if ret != "" {
		p, ok := fr.params[ret]
		if !ok || len(p) != len(out) {
			return fmt.Errorf("return parameter %s: not a declared .param of %d bytes", ret, len(out))
		}
		copy(p, out)
	}
	return nil
}
