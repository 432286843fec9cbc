package verifier

import (
	"math"
	"math/bits"

	"github.com/cilium/ebpf/asm"
)

// tnum is a value whose bits are partly known: bits set in m are unknown,
// the others equal the bits of v (v has no bit of m set).
type tnum struct{ v, m uint64 }

var tunknown = tnum{0, math.MaxUint64}

func tconst(c uint64) tnum { return tnum{c, 0} }

// trange is the tightest tnum holding every value of [lo, hi].
func trange(lo, hi uint64) tnum {
	chi := lo ^ hi
	n := 64 - bits.LeadingZeros64(chi)
	if n >= 64 {
		return tunknown
	}
	delta := uint64(1)<<n - 1
	return tnum{lo &^ delta, delta}
}

func (a tnum) add(b tnum) tnum {
	sm := a.m + b.m
	sv := a.v + b.v
	chi := (sm + sv) ^ sv
	mu := chi | a.m | b.m
	return tnum{sv &^ mu, mu}
}

func (a tnum) sub(b tnum) tnum {
	dv := a.v - b.v
	chi := (dv + a.m) ^ (dv - b.m)
	mu := chi | a.m | b.m
	return tnum{dv &^ mu, mu}
}

func (a tnum) and(b tnum) tnum {
	v := a.v & b.v
	return tnum{v, (a.v | a.m) & (b.v | b.m) &^ v}
}

func (a tnum) or(b tnum) tnum {
	v := a.v | b.v
	return tnum{v, (a.m | b.m) &^ v}
}

func (a tnum) xor(b tnum) tnum {
	mu := a.m | b.m
	return tnum{(a.v ^ b.v) &^ mu, mu}
}

// mul keeps what is certain without tracking carries: a product of
// multiples of 2^i and 2^j is a multiple of 2^(i+j).
func (a tnum) mul(b tnum) tnum {
	if a.m == 0 && b.m == 0 {
		return tconst(a.v * b.v)
	}
	tz := a.tz() + b.tz()
	if tz >= 64 {
		return tconst(0)
	}
	return tnum{0, math.MaxUint64 << tz}
}

// tz is the number of low bits known to be zero.
func (a tnum) tz() int { return bits.TrailingZeros64(a.v | a.m) }

func (a tnum) lsh(k uint) tnum  { return tnum{a.v << k, a.m << k} }
func (a tnum) rsh(k uint) tnum  { return tnum{a.v >> k, a.m >> k} }
func (a tnum) arsh(k uint) tnum { return tnum{uint64(int64(a.v) >> k), uint64(int64(a.m) >> k)} }

// in reports whether every value of a is a value of b.
func (a tnum) in(b tnum) bool {
	return a.m&^b.m == 0 && a.v&^b.m == b.v
}

// intersect returns the values in both, ok=false when there are none.
func (a tnum) intersect(b tnum) (tnum, bool) {
	if (a.v^b.v)&^(a.m|b.m) != 0 {
		return tnum{}, false
	}
	m := a.m & b.m
	return tnum{(a.v | b.v) &^ m, m}, true
}

func (a tnum) trunc32() tnum { return tnum{a.v & math.MaxUint32, a.m & math.MaxUint32} }

// scalar is the abstract value of an integer: unsigned and signed ranges
// and known bits, kept consistent by norm.
type scalar struct {
	umin, umax uint64
	smin, smax int64
	t          tnum
}

func sconst(c uint64) scalar {
	return scalar{umin: c, umax: c, smin: int64(c), smax: int64(c), t: tconst(c)}
}

func sunknown() scalar {
	return scalar{umax: math.MaxUint64, smin: math.MinInt64, smax: math.MaxInt64, t: tunknown}
}

// urange is an unknown value in [lo, hi].
func urange(lo, hi uint64) scalar {
	s := sunknown()
	s.umin, s.umax = lo, hi
	s.norm()
	return s
}

func (s scalar) isConst() bool { return s.t.m == 0 }

func (s scalar) in(o scalar) bool {
	return s.umin >= o.umin && s.umax <= o.umax && s.smin >= o.smin && s.smax <= o.smax && s.t.in(o.t)
}

// norm tightens every part of s from the others; false when s holds no
// value (an impossible path).
func (s *scalar) norm() bool {
	for range 2 {
		s.umin = max(s.umin, s.t.v)
		s.umax = min(s.umax, s.t.v|s.t.m)
		if s.t.m&(1<<63) == 0 {
			s.smin = max(s.smin, int64(s.t.v))
			s.smax = min(s.smax, int64(s.t.v|s.t.m))
		}
		if s.smin >= 0 || s.smax < 0 {
			s.umin = max(s.umin, uint64(s.smin))
			s.umax = min(s.umax, uint64(s.smax))
		}
		if s.umax <= math.MaxInt64 || s.umin > math.MaxInt64 {
			s.smin = max(s.smin, int64(s.umin))
			s.smax = min(s.smax, int64(s.umax))
		}
		if s.umin > s.umax || s.smin > s.smax {
			return false
		}
		t, ok := s.t.intersect(trange(s.umin, s.umax))
		if !ok {
			return false
		}
		s.t = t
	}
	return true
}

func addOverflows(x, y int64) bool {
	r := x + y
	return (x > 0 && y > 0 && r < 0) || (x < 0 && y < 0 && r >= 0)
}

func subOverflows(x, y int64) bool {
	r := x - y
	return (x >= 0 && y < 0 && r < 0) || (x < 0 && y > 0 && r >= 0)
}

// exact computes op on two known values with BPF semantics (x/0 = 0,
// x%0 = x).
func exact(op asm.ALUOp, a, b uint64) uint64 {
	switch op {
	case asm.Add:
		return a + b
	case asm.Sub:
		return a - b
	case asm.Mul:
		return a * b
	case asm.Div:
		if b == 0 {
			return 0
		}
		return a / b
	case asm.Mod:
		if b == 0 {
			return a
		}
		return a % b
	case asm.Or:
		return a | b
	case asm.And:
		return a & b
	case asm.Xor:
		return a ^ b
	case asm.LSh:
		return a << (b & 63)
	case asm.RSh:
		return a >> (b & 63)
	case asm.ArSh:
		return uint64(int64(a) >> (b & 63))
	case asm.Neg:
		return -a
	case asm.Mov:
		return b
	}
	return 0
}

// alu64 is op on 64-bit values. Shifts by a variable or out-of-range amount
// give an unknown value (the caller rejects constant out-of-range shifts).
func alu64(op asm.ALUOp, a, b scalar) scalar {
	if op == asm.Mov {
		return b
	}
	if a.isConst() && (b.isConst() || op == asm.Neg) {
		return sconst(exact(op, a.t.v, b.t.v))
	}
	r := sunknown()
	switch op {
	case asm.Add:
		r.t = a.t.add(b.t)
		lo, c1 := bits.Add64(a.umin, b.umin, 0)
		hi, c2 := bits.Add64(a.umax, b.umax, 0)
		if c1 == 0 && c2 == 0 {
			r.umin, r.umax = lo, hi
		}
		if !addOverflows(a.smin, b.smin) && !addOverflows(a.smax, b.smax) {
			r.smin, r.smax = a.smin+b.smin, a.smax+b.smax
		}
	case asm.Sub:
		r.t = a.t.sub(b.t)
		if a.umin >= b.umax {
			r.umin, r.umax = a.umin-b.umax, a.umax-b.umin
		}
		if !subOverflows(a.smin, b.smax) && !subOverflows(a.smax, b.smin) {
			r.smin, r.smax = a.smin-b.smax, a.smax-b.smin
		}
	case asm.Mul:
		r.t = a.t.mul(b.t)
		if hi, lo := bits.Mul64(a.umax, b.umax); hi == 0 {
			r.umin, r.umax = a.umin*b.umin, lo
		}
	case asm.Div:
		if b.umin > 0 {
			r.umin, r.umax = a.umin/b.umax, a.umax/b.umin
		} else {
			r.umax = a.umax
		}
	case asm.Mod:
		if b.umin > 0 {
			r.umax = min(a.umax, b.umax-1)
		} else {
			r.umax = a.umax
		}
	case asm.And:
		r.t = a.t.and(b.t)
		r.umax = min(a.umax, b.umax)
	case asm.Or:
		r.t = a.t.or(b.t)
		r.umin = max(a.umin, b.umin)
	case asm.Xor:
		r.t = a.t.xor(b.t)
	case asm.LSh, asm.RSh, asm.ArSh:
		if !b.isConst() || b.t.v >= 64 {
			break
		}
		k := uint(b.t.v)
		switch op {
		case asm.LSh:
			r.t = a.t.lsh(k)
			if k == 0 || a.umax>>(64-k) == 0 {
				r.umin, r.umax = a.umin<<k, a.umax<<k
			}
		case asm.RSh:
			r.t = a.t.rsh(k)
			r.umin, r.umax = a.umin>>k, a.umax>>k
		case asm.ArSh:
			r.t = a.t.arsh(k)
			r.smin, r.smax = a.smin>>k, a.smax>>k
		}
	}
	if !r.norm() {
		return sunknown()
	}
	return r
}

// trunc32 is the low 32 bits of s, zero-extended.
func trunc32(s scalar) scalar {
	if s.umax <= math.MaxUint32 {
		return s
	}
	r := sunknown()
	r.t = s.t.trunc32()
	r.umax = math.MaxUint32
	if !r.norm() {
		return urange(0, math.MaxUint32)
	}
	return r
}

// alu32 is op on the low 32 bits, the result zero-extended. For every op
// but arsh the low 32 bits of the 64-bit op on zero-extended operands are
// the 32-bit result.
func alu32(op asm.ALUOp, a, b scalar) scalar {
	a, b = trunc32(a), trunc32(b)
	if op == asm.ArSh {
		if a.umax >= 1<<31 {
			return urange(0, math.MaxUint32)
		}
		op = asm.RSh
	}
	if (op == asm.LSh || op == asm.RSh) && (!b.isConst() || b.t.v >= 32) {
		return urange(0, math.MaxUint32)
	}
	return trunc32(alu64(op, a, b))
}

// negate is the jump op that holds when op does not.
func negate(op asm.JumpOp) asm.JumpOp {
	switch op {
	case asm.JEq:
		return asm.JNE
	case asm.JNE:
		return asm.JEq
	case asm.JGT:
		return asm.JLE
	case asm.JLE:
		return asm.JGT
	case asm.JGE:
		return asm.JLT
	case asm.JLT:
		return asm.JGE
	case asm.JSGT:
		return asm.JSLE
	case asm.JSLE:
		return asm.JSGT
	case asm.JSGE:
		return asm.JSLT
	case asm.JSLT:
		return asm.JSGE
	case asm.JSet:
		return jNotSet
	case jNotSet:
		return asm.JSet
	}
	return op
}

// jNotSet is the negation of JSet (not a real opcode).
const jNotSet asm.JumpOp = 0xf0

// refine narrows a and b under the assumption that "a op b" holds; ok is
// false when it cannot hold.
func refine(op asm.JumpOp, a, b scalar) (scalar, scalar, bool) {
	switch op {
	case asm.JLT, asm.JLE, asm.JSLT, asm.JSLE:
		swapped := map[asm.JumpOp]asm.JumpOp{asm.JLT: asm.JGT, asm.JLE: asm.JGE, asm.JSLT: asm.JSGT, asm.JSLE: asm.JSGE}[op]
		nb, na, ok := refine(swapped, b, a)
		return na, nb, ok
	}
	switch op {
	case asm.JEq:
		lo, hi := max(a.umin, b.umin), min(a.umax, b.umax)
		slo, shi := max(a.smin, b.smin), min(a.smax, b.smax)
		t, ok := a.t.intersect(b.t)
		if !ok {
			return a, b, false
		}
		a.umin, a.umax, a.smin, a.smax, a.t = lo, hi, slo, shi, t
		b = a
	case asm.JNE:
		if a.isConst() && b.isConst() && a.t.v == b.t.v {
			return a, b, false
		}
		a, b = exclude(a, b), exclude(b, a)
	case asm.JGT:
		if b.umin == math.MaxUint64 || a.umax == 0 {
			return a, b, false
		}
		a.umin = max(a.umin, b.umin+1)
		b.umax = min(b.umax, a.umax-1)
	case asm.JGE:
		a.umin = max(a.umin, b.umin)
		b.umax = min(b.umax, a.umax)
	case asm.JSGT:
		if b.smin == math.MaxInt64 || a.smax == math.MinInt64 {
			return a, b, false
		}
		a.smin = max(a.smin, b.smin+1)
		b.smax = min(b.smax, a.smax-1)
	case asm.JSGE:
		a.smin = max(a.smin, b.smin)
		b.smax = min(b.smax, a.smax)
	case asm.JSet:
		if a.t.v&b.t.v != 0 {
			break // certainly set: nothing to learn
		}
		if (a.t.v|a.t.m)&(b.t.v|b.t.m) == 0 {
			return a, b, false
		}
	case jNotSet:
		if b.isConst() {
			if a.t.v&b.t.v != 0 {
				return a, b, false
			}
			a.t = tnum{a.t.v &^ b.t.v, a.t.m &^ b.t.v}
		}
	}
	okA, okB := a.norm(), b.norm()
	return a, b, okA && okB
}

// exclude removes the constant c (if b is one) from the ends of a's ranges.
func exclude(a, b scalar) scalar {
	if !b.isConst() {
		return a
	}
	c := b.t.v
	if a.umin == c && a.umin < a.umax {
		a.umin++
	} else if a.umax == c && a.umin < a.umax {
		a.umax--
	}
	if a.smin == int64(c) && a.smin < a.smax {
		a.smin++
	} else if a.smax == int64(c) && a.smin < a.smax {
		a.smax--
	}
	return a
}
