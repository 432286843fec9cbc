package verifier

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cilium/ebpf/asm"
)

// contains reports whether the concrete value x is one of s's values.
func (s scalar) contains(x uint64) bool {
	return x >= s.umin && x <= s.umax && int64(x) >= s.smin && int64(x) <= s.smax && x&^s.t.m == s.t.v
}

// randAbstract returns an abstract value and a sampler of concrete values
// inside it: constants, small and large unsigned ranges, signed ranges
// across zero, ranges at the 32- and 63-bit edges, and the unknown value.
func randAbstract(r *rand.Rand) (scalar, func() uint64) {
	edges := []uint64{0, 1, 7, 31, 32, 255, math.MaxInt32, 1 << 31, math.MaxUint32, 1 << 32, math.MaxInt64, 1 << 63, math.MaxUint64 - 8}
	switch r.IntN(5) {
	case 0:
		c := edges[r.IntN(len(edges))] + uint64(r.IntN(3))
		return sconst(c), func() uint64 { return c }
	case 1:
		lo := edges[r.IntN(len(edges))]
		n := uint64(r.IntN(100))
		if lo+n < lo {
			n = 0
		}
		return urange(lo, lo+n), func() uint64 { return lo + r.Uint64N(n+1) }
	case 2:
		lo, n := -int64(r.IntN(50)), uint64(r.IntN(100))
		s := sunknown()
		s.smin, s.smax = lo, lo+int64(n)
		s.norm()
		return s, func() uint64 { return uint64(lo + int64(r.Uint64N(n+1))) }
	case 3:
		hi := r.Uint64() >> r.IntN(64)
		return urange(0, hi), func() uint64 {
			if hi == math.MaxUint64 {
				return r.Uint64()
			}
			return r.Uint64N(hi + 1)
		}
	}
	return sunknown(), r.Uint64
}

// refALU is what the BPF ISA (and the kernel's interpreter) computes, the
// answer key of the tests here, written apart from the verifier's own
// constant folding (exact) so that a mistake there cannot agree with
// itself: a 32-bit op works on the low halves and zero-extends; shift
// amounts are masked to the width; division by zero gives 0, modulo by
// zero leaves the dividend (truncated to the width).
func refALU(op asm.ALUOp, a, b uint64, is64 bool) uint64 {
	if !is64 {
		a, b = uint64(uint32(a)), uint64(uint32(b))
	}
	bits := uint64(32)
	if is64 {
		bits = 64
	}
	var r uint64
	switch op {
	case asm.Add:
		r = a + b
	case asm.Sub:
		r = a - b
	case asm.Mul:
		r = a * b
	case asm.Div:
		if b != 0 {
			r = a / b
		}
	case asm.Mod:
		r = a
		if b != 0 {
			r = a % b
		}
	case asm.Or:
		r = a | b
	case asm.And:
		r = a & b
	case asm.Xor:
		r = a ^ b
	case asm.LSh:
		r = a << (b % bits)
	case asm.RSh:
		r = a >> (b % bits)
	case asm.ArSh:
		if is64 {
			r = uint64(int64(a) >> (b % bits))
		} else {
			r = uint64(uint32(int32(uint32(a)) >> (b % bits)))
		}
	case asm.Neg:
		r = -a
	case asm.Mov:
		r = b
	default:
		panic(op)
	}
	if !is64 {
		r = uint64(uint32(r))
	}
	return r
}

// Every concrete result of an ALU op on values inside the operands' abstract
// values lies inside the abstract result: the range analysis never proves
// a bound that does not hold.
func TestALUSound(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ops := []asm.ALUOp{asm.Add, asm.Sub, asm.Mul, asm.Div, asm.Mod, asm.Or, asm.And, asm.Xor, asm.LSh, asm.RSh, asm.ArSh, asm.Neg, asm.Mov}
	for i := 0; i < 20000; i++ {
		op := ops[r.IntN(len(ops))]
		is64 := r.IntN(2) == 0
		a, sa := randAbstract(r)
		b, sb := randAbstract(r)
		if op == asm.LSh || op == asm.RSh || op == asm.ArSh {
			lim := 64
			if !is64 {
				lim = 32
			}
			c := uint64(r.IntN(lim))
			b, sb = sconst(c), func() uint64 { return c }
		}
		var res scalar
		if is64 {
			res = alu64(op, a, b)
		} else {
			res = alu32(op, a, b)
		}
		for j := 0; j < 8; j++ {
			x, y := sa(), sb()
			want := refALU(op, x, y, is64)
			if !res.contains(want) {
				t.Fatalf("%v (64=%v) of %d in %+v and %d in %+v = %d, not in %+v", op, is64, x, a, y, b, want, res)
			}
		}
	}
}

func holds(op asm.JumpOp, x, y uint64) bool {
	switch op {
	case asm.JEq:
		return x == y
	case asm.JNE:
		return x != y
	case asm.JGT:
		return x > y
	case asm.JGE:
		return x >= y
	case asm.JLT:
		return x < y
	case asm.JLE:
		return x <= y
	case asm.JSGT:
		return int64(x) > int64(y)
	case asm.JSGE:
		return int64(x) >= int64(y)
	case asm.JSLT:
		return int64(x) < int64(y)
	case asm.JSLE:
		return int64(x) <= int64(y)
	case asm.JSet:
		return x&y != 0
	case jNotSet:
		return x&y == 0
	}
	panic(op)
}

// A branch never drops a side that concrete values can take, and the
// narrowed values still hold the concrete ones that take it.
func TestRefineSound(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ops := []asm.JumpOp{asm.JEq, asm.JNE, asm.JGT, asm.JGE, asm.JLT, asm.JLE, asm.JSGT, asm.JSGE, asm.JSLT, asm.JSLE, asm.JSet, jNotSet}
	for i := 0; i < 20000; i++ {
		op := ops[r.IntN(len(ops))]
		a, sa := randAbstract(r)
		b, sb := randAbstract(r)
		for j := 0; j < 8; j++ {
			x, y := sa(), sb()
			if !holds(op, x, y) {
				continue
			}
			na, nb, ok := refine(op, a, b)
			if !ok || !na.contains(x) || !nb.contains(y) {
				t.Fatalf("%v: %d in %+v, %d in %+v holds, refined to ok=%v %+v %+v", op, x, a, y, b, ok, na, nb)
			}
		}
	}
}

// The analysis is precise enough for the loops clang emits: a counter
// compared against a constant is known on each side.
func TestRefinePrecise(t *testing.T) {
	i := urange(0, 100)
	in, _, ok := refine(asm.JLT, i, sconst(8))
	if !ok || in.umax != 7 {
		t.Fatalf("i < 8: %+v", in)
	}
	out, _, ok := refine(asm.JGE, i, sconst(8))
	if !ok || out.umin != 8 {
		t.Fatalf("i >= 8: %+v", out)
	}
	if _, _, ok := refine(asm.JGT, sconst(3), sconst(5)); ok {
		t.Fatal("3 > 5 is possible")
	}
	idx := alu64(asm.LSh, alu64(asm.And, sunknown(), sconst(7)), sconst(3))
	if idx.umax != 56 || idx.t.tz() < 3 {
		t.Fatalf("(x & 7) << 3 = %+v", idx)
	}
}
