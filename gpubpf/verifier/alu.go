package verifier

import (
	"math"
	"math/bits"

	"github.com/cilium/ebpf/asm"
)

// ALU instructions: scalar arithmetic through the range analysis, and the
// pointer arithmetic the rules allow.

func (v *verifier) alu(st *state, pc int, ins *asm.Instruction) error {
	is64 := ins.OpCode.Class() == asm.ALU64Class
	op := ins.OpCode.ALUOp()
	if ins.Dst == asm.R10 {
		return v.errAt(pc, ErrProgram, "r10 is read-only (the frame pointer)")
	}
	if op == asm.Swap {
		d, err := v.read(st, pc, ins.Dst)
		if err != nil {
			return err
		}
		if d.k != kScalar {
			return v.errAt(pc, ErrMemory, "byte swap of a %s", d.k)
		}
		size := uint(ins.Constant)
		if size != 16 && size != 32 && size != 64 {
			return v.errAt(pc, ErrProgram, "byte swap of %d bits", size)
		}
		r := d.s
		if is64 || ins.OpCode.Endianness() != asm.LE { // bswap, or to big endian
			r = sunknown()
		}
		if size < 64 {
			r = alu64(asm.And, r, sconst(1<<size-1))
		}
		return v.write(st, pc, ins.Dst, scalarReg(r, d.div))
	}
	var src reg
	if ins.OpCode.Source() == asm.RegSource {
		var err error
		if src, err = v.read(st, pc, ins.Src); err != nil {
			return err
		}
	} else {
		c := uint64(ins.Constant)
		if !is64 {
			c = uint64(uint32(ins.Constant))
		}
		src = scalarReg(sconst(c), false)
	}
	switch op {
	case asm.Mov:
		if is64 {
			if src.k == kScalar && ins.OpCode.Source() == asm.RegSource {
				if src.id == 0 {
					v.nextID++
					src.id = v.nextID
					st.r[ins.Src].id = src.id
				}
			}
			return v.write(st, pc, ins.Dst, src)
		}
		if src.k != kScalar {
			return v.errAt(pc, ErrMemory, "32-bit move of a %s", src.k)
		}
		r := reg{k: kScalar, s: trunc32(src.s), div: src.div, src: src.src}
		if src.tag != tagNone && !src.shifted && src.s.umax <= math.MaxUint32 {
			r.tag = src.tag
		}
		return v.write(st, pc, ins.Dst, r)
	case asm.MovSX8, asm.MovSX16, asm.MovSX32:
		if src.k != kScalar {
			return v.errAt(pc, ErrMemory, "sign-extending move of a %s", src.k)
		}
		r := sunknown()
		if !is64 {
			r = urange(0, math.MaxUint32)
		}
		out := scalarReg(r, src.div)
		out.src = src.src
		return v.write(st, pc, ins.Dst, out)
	}
	d, err := v.read(st, pc, ins.Dst)
	if err != nil {
		return err
	}
	if d.k.isPtr() || src.k.isPtr() {
		return v.ptrArith(st, pc, ins, op, is64, d, src)
	}
	switch op {
	case asm.Add, asm.Sub, asm.Mul, asm.Div, asm.Mod, asm.Or, asm.And, asm.Xor, asm.Neg:
	case asm.LSh, asm.RSh, asm.ArSh:
		lim := uint64(64)
		if !is64 {
			lim = 32
		}
		if src.s.isConst() && src.s.t.v >= lim {
			return v.errAt(pc, ErrProgram, "shift by %d: out of range for a %d-bit value", src.s.t.v, lim)
		}
	case asm.SDiv, asm.SMod:
		r := sunknown()
		if !is64 {
			r = urange(0, math.MaxUint32)
		}
		out := scalarReg(r, d.div || src.div)
		out.src = d.src | src.src
		return v.write(st, pc, ins.Dst, out)
	default:
		return v.errAt(pc, ErrProgram, "unsupported ALU op %v", op)
	}
	var s scalar
	if is64 {
		s = alu64(op, d.s, src.s)
	} else {
		s = alu32(op, d.s, src.s)
	}
	r := scalarReg(s, d.div || src.div)
	r.src = d.src | src.src
	if d.tag == tagGlobal && !d.shifted && src.s.isConst() {
		if monotone(op, is64, d.s, src.s.t.v) {
			r.tag = tagGlobal
		}
	}
	// A leader value survives clang's zero-extension of a u32 (<<32 then
	// >>32, or & 0xffffffff): the value is unchanged.
	if d.tag != tagNone && is64 && src.s.isConst() {
		c := src.s.t.v
		switch {
		case op == asm.LSh && c == 32 && !d.shifted && d.s.umax <= math.MaxUint32:
			r.tag, r.shifted = d.tag, true
		case op == asm.RSh && c == 32 && d.shifted:
			r.tag = d.tag
		case op == asm.And && !d.shifted && c&(c+1) == 0 && d.s.umax <= c:
			r.tag = d.tag
		}
	}
	return v.write(st, pc, ins.Dst, r)
}

// monotone: op with the constant c keeps a strictly increasing function
// of the thread id strictly increasing, without wrapping for any value of
// x's range in the operation's width (add, sub, multiply by c >= 1, left
// shift): what keeps an array key injective over the launch's threads.
func monotone(op asm.ALUOp, is64 bool, x scalar, c uint64) bool {
	lim := uint64(math.MaxUint64)
	if !is64 {
		lim = math.MaxUint32
		if x.umax > lim || c > lim {
			return false
		}
	}
	switch op {
	case asm.Add:
		return x.umax <= lim-c
	case asm.Or:
		// no bit of c can be set in x: the same as adding c
		return (x.t.v|x.t.m)&c == 0
	case asm.Sub:
		return x.umin >= c
	case asm.Mul:
		hi, lo := bits.Mul64(x.umax, c)
		return c >= 1 && hi == 0 && lo <= lim
	case asm.LSh:
		if c >= 64 {
			return false
		}
		return x.umax <= lim>>c
	}
	return false
}

// ptrArith allows pointer +/- scalar only: constant offsets on every
// pointer but a map pointer, bounded variable ones on map values (checked
// at the access).
func (v *verifier) ptrArith(st *state, pc int, ins *asm.Instruction, op asm.ALUOp, is64 bool, d, src reg) error {
	if !is64 {
		return v.errAt(pc, ErrMemory, "32-bit arithmetic on a pointer")
	}
	p, sc := d, src
	switch {
	case op == asm.Add && d.k.isPtr() && src.k.isPtr():
		return v.errAt(pc, ErrMemory, "adding two pointers")
	case op == asm.Add && src.k.isPtr():
		p, sc = src, d
	case op == asm.Sub && d.k.isPtr() && src.k.isPtr():
		return v.errAt(pc, ErrMemory, "subtracting pointers is not allowed")
	case op == asm.Sub && src.k.isPtr():
		return v.errAt(pc, ErrMemory, "subtracting a pointer from a scalar")
	case op != asm.Add && op != asm.Sub:
		return v.errAt(pc, ErrMemory, "%v on a %s: only pointer +/- scalar is allowed", op, p.k)
	}
	switch p.k {
	case kMapPtr:
		return v.errAt(pc, ErrMemory, "arithmetic on map pointer %q: a map pointer is only a helper argument", v.maps[p.m].name)
	case kMapValueOrNull:
		return v.errAt(pc, ErrMemory, "arithmetic on a map value pointer before its null check")
	}
	if sc.s.isConst() {
		c := int64(sc.s.t.v)
		if op == asm.Sub {
			c = -c
		}
		off := p.off + c
		if c > 1<<30 || c < -(1<<30) || off > 1<<30 || off < -(1<<30) {
			return v.errAt(pc, ErrMemory, "pointer offset %d out of range", c)
		}
		p.off = off
	} else {
		if p.k != kMapValue {
			return v.errAt(pc, ErrMemory, "variable offset added to a %s: only constant offsets are allowed there", p.k)
		}
		p.s = alu64(op, p.s, sc.s)
	}
	p.div = p.div || sc.div
	p.id = 0
	p.tag = tagNone
	// (own stays: every access is bounded to the one entry's value)
	return v.write(st, pc, ins.Dst, p)
}
