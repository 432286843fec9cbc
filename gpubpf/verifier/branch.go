package verifier

import (
	"math"

	"github.com/cilium/ebpf/asm"
)

// Conditional jumps: narrowing on each side, null checks, and where
// control becomes divergent or picks a leader.

func (v *verifier) jump(st *state, pc int, ins *asm.Instruction) (bool, error) {
	op := ins.OpCode.JumpOp()
	target := jumpTarget(pc, ins)
	if op == asm.Ja {
		v.takeEdge(pc, target)
		st.prev, st.pc = pc, target
		return false, nil
	}
	is32 := ins.OpCode.Class() == asm.Jump32Class
	a, err := v.read(st, pc, ins.Dst)
	if err != nil {
		return true, err
	}
	regSrc := ins.OpCode.Source() == asm.RegSource
	var b reg
	if regSrc {
		if b, err = v.read(st, pc, ins.Src); err != nil {
			return true, err
		}
	} else {
		c := uint64(ins.Constant)
		if is32 {
			c = uint64(uint32(ins.Constant))
		}
		b = scalarReg(sconst(c), false)
	}
	taken, fall := st.clone(), st
	okT, okF := true, true
	div := a.div || b.div
	if a.k.isPtr() || b.k.isPtr() {
		if !(op == asm.JEq || op == asm.JNE) || !a.k.isPtr() || b.k != kScalar || !b.s.isConst() || b.s.t.v != 0 || is32 {
			return true, v.errAt(pc, ErrMemory, "pointer comparison (%v of a %s and a %s): only a null check of a map value pointer is allowed", op, a.k, b.k)
		}
		eq, ne := taken, fall
		if op == asm.JNE {
			eq, ne = fall, taken
		}
		if a.k == kMapValueOrNull {
			nullCheck(eq, a.id, true)
			nullCheck(ne, a.id, false)
		} else if op == asm.JEq {
			okT = false
		} else {
			okF = false
		}
	} else {
		okT = v.branch(taken, op, is32, regSrc, ins, a, b)
		okF = v.branch(fall, negate(op), is32, regSrc, ins, a, b)
	}
	if okT && okF && div && st.ctrl != cLeader {
		r := region{branch: pc, reconv: v.g.ipdom[pc], ctrl: st.ctrl, tidZero: st.tidZero, oneThread: st.oneThread}
		for _, s := range []*state{taken, fall} {
			if !hasRegion(s, pc) {
				s.regions = append(s.regions, r)
			}
			s.ctrl = cDivergent
		}
		// A leader guard: the side where lane_id(), thread_linear_id() or
		// thread_idx(d) is proven 0, however the comparison is written.
		for _, s := range []*state{taken, fall} {
			leaderSide(s, ins.Dst)
			if regSrc {
				leaderSide(s, ins.Src)
			}
		}
	}
	// Block 0: a side where every block index component (uniform values)
	// is proven 0.
	for _, s := range []*state{taken, fall} {
		blockSide(s, ins.Dst)
		if regSrc {
			blockSide(s, ins.Src)
		}
	}
	switch {
	case okT && okF:
		v.takeEdge(pc, target)
		taken.prev, taken.pc = pc, target
		v.work = append(v.work, taken)
		st.prev, st.pc = pc, pc+1
		return false, nil
	case okT:
		v.takeEdge(pc, target)
		*st = *taken
		st.prev, st.pc = pc, target
		return false, nil
	case okF:
		st.prev, st.pc = pc, pc+1
		return false, nil
	}
	return true, nil
}

// leaderSide makes s a leader path when register r holds a leader value
// (lane_id, thread_linear_id, thread_idx) narrowed to exactly 0 there.
func leaderSide(s *state, r asm.Register) {
	x := s.r[r]
	if x.k != kScalar || x.tag == tagNone || x.shifted || !x.s.isConst() || x.s.t.v != 0 {
		return
	}
	switch x.tag {
	case tagLane:
		s.ctrl = cLeader
	case tagThreadLinear:
		s.ctrl, s.oneThread = cLeader, true
	case tagTidX, tagTidY, tagTidZ:
		s.tidZero |= 1 << (x.tag - tagTidX)
		if s.tidZero == 7 {
			s.ctrl, s.oneThread = cLeader, true
		}
	}
}

// blockSide notes on s a block index component (or the linear block id)
// that register r holds, narrowed to exactly 0 there.
func blockSide(s *state, r asm.Register) {
	x := s.r[r]
	if x.k != kScalar || x.shifted || !x.s.isConst() || x.s.t.v != 0 {
		return
	}
	switch x.tag {
	case tagBidX, tagBidY, tagBidZ:
		s.bidZero |= 1 << (x.tag - tagBidX)
	case tagBlockLinear:
		s.bidZero = 7
	}
}

func hasRegion(s *state, branch int) bool {
	for _, r := range s.regions {
		if r.branch == branch {
			return true
		}
	}
	return false
}

func (v *verifier) takeEdge(pc, target int) {
	if target <= pc {
		v.backEdges[pc]++
	}
}

// nullCheck turns every copy of map_lookup_elem result id into a null
// scalar or a map value pointer.
func nullCheck(st *state, id uint32, isNull bool) {
	fix := func(r *reg) {
		if r.k != kMapValueOrNull || r.id != id {
			return
		}
		if isNull {
			*r = reg{k: kScalar, s: sconst(0), div: r.div}
		} else {
			r.k, r.id = kMapValue, 0
		}
	}
	for i := range st.r {
		fix(&st.r[i])
	}
	for i := range st.stk {
		if st.stk[i].spill {
			fix(&st.stk[i].r)
		}
	}
}

// branch narrows st's registers under "a op b"; false: impossible.
func (v *verifier) branch(st *state, op asm.JumpOp, is32, regSrc bool, ins *asm.Instruction, a, b reg) bool {
	if is32 {
		lim := uint64(math.MaxUint32)
		switch op {
		case asm.JSGT, asm.JSGE, asm.JSLT, asm.JSLE:
			lim = math.MaxInt32
		}
		if a.s.umax > lim || b.s.umax > lim {
			if a.s.isConst() && b.s.isConst() {
				return cmp32(op, uint32(a.s.t.v), uint32(b.s.t.v))
			}
			return true
		}
	}
	na, nb, ok := refine(op, a.s, b.s)
	if !ok {
		return false
	}
	setScalar(st, ins.Dst, a.id, na)
	if regSrc {
		setScalar(st, ins.Src, b.id, nb)
	}
	return true
}

func cmp32(op asm.JumpOp, a, b uint32) bool {
	switch op {
	case asm.JEq:
		return a == b
	case asm.JNE:
		return a != b
	case asm.JGT:
		return a > b
	case asm.JGE:
		return a >= b
	case asm.JLT:
		return a < b
	case asm.JLE:
		return a <= b
	case asm.JSGT:
		return int32(a) > int32(b)
	case asm.JSGE:
		return int32(a) >= int32(b)
	case asm.JSLT:
		return int32(a) < int32(b)
	case asm.JSLE:
		return int32(a) <= int32(b)
	case asm.JSet:
		return a&b != 0
	case jNotSet:
		return a&b == 0
	}
	return true
}

// setScalar gives r (and every copy of it) the narrowed value s.
func setScalar(st *state, r asm.Register, id uint32, s scalar) {
	st.r[r].s = s
	if id == 0 {
		return
	}
	for i := range st.r {
		if st.r[i].k == kScalar && st.r[i].id == id {
			st.r[i].s = s
		}
	}
	for i := range st.stk {
		if sl := &st.stk[i]; sl.spill && sl.r.k == kScalar && sl.r.id == id {
			sl.r.s = s
		}
	}
}
