package ptx

import (
	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/gpubpf/abi"
)

// Stores to the stack that nothing reads.
//
// A bpftime program's bpf_printk builds its format string on the stack, up
// to ten 8-byte stores a call, and the device drops the call (printk is a
// host helper). The stores stay, in every thread, and since the stack's
// address reaches a helper on some path (map_update_elem, a ring's
// output), ptxas keeps them as local-memory stores: on every kernel of a
// llama.cpp prefill, launchlate's two printk strings were the most of what
// each thread wrote.
//
// deadStackStores finds them: a backward liveness of the stack's bytes
// over the program's instructions, where a load through a stack pointer
// and a helper call given one read bytes, a store writes them, and a store
// whose bytes no later instruction reads on any path is dead. Which
// registers hold stack pointers is a forward pass first (r10, copies of
// it, plus or minus constants). Where a stack pointer goes anywhere the
// two passes do not follow (stored to memory, into other arithmetic, to a
// bpf-to-bpf call, an offset that differs between paths), nothing is
// removed. A helper given a stack pointer reads from it to the top of the
// stack, except the ones the device drops (printk, puts) and bpftime's
// index helpers, which only write through theirs.

// stackVal is what the forward pass knows of a register.
type stackVal struct {
	kind byte // vUnknown, vConst, vFP (the stack pointer + off), vFPAny (a stack pointer, offset not one value)
	v    int64
}

const (
	vUnknown byte = iota
	vConst
	vFP
	vFPAny
)

func mergeVal(a, b stackVal) stackVal {
	switch {
	case a == b:
		return a
	case (a.kind == vFP || a.kind == vFPAny) || (b.kind == vFP || b.kind == vFPAny):
		return stackVal{kind: vFPAny}
	}
	return stackVal{}
}

type stackState [11]stackVal

func isFP(v stackVal) bool { return v.kind == vFP || v.kind == vFPAny }

// stackBytes is the liveness set, one bit a stack byte (offset -StackSize..-1).
type stackBytes [StackSize / 64]uint64

func (s *stackBytes) set(off int64, n int64, on bool) {
	for i := off; i < off+n; i++ {
		b := i + StackSize
		if on {
			s[b/64] |= 1 << (b % 64)
		} else {
			s[b/64] &^= 1 << (b % 64)
		}
	}
}

func (s *stackBytes) any(off int64, n int64) bool {
	for i := off; i < off+n; i++ {
		b := i + StackSize
		if s[b/64]&(1<<(b%64)) != 0 {
			return true
		}
	}
	return false
}

func (s *stackBytes) or(o *stackBytes) {
	for i := range s {
		s[i] |= o[i]
	}
}

// noStackRead: helpers that read no memory through a stack pointer on the
// device: dropped ones, and those that only write through theirs.
var noStackRead = map[int64]bool{
	abi.BtPuts: true, abi.BtTracePrintk: true,
	abi.BtBlockIdx: true, abi.BtBlockDim: true, abi.BtThreadIdx: true, abi.BtGridDim: true,
}

// stackFlow is the two passes' view of a program (one function): each
// instruction's successors and the registers before it (nil: unreachable).
type stackFlow struct {
	succ [][]int
	in   []*stackState
}

// stackPointers runs the forward pass; nil when the stack's pointers
// cannot be followed. jumpTarget: each jump's raw target.
func stackPointers(insns asm.Instructions, raw []int, jumpTarget []int) *stackFlow {
	n := len(insns)
	if n == 0 {
		return nil
	}
	rawIdx := map[int]int{}
	for i, r := range raw {
		rawIdx[r] = i
	}
	succ := make([][]int, n)
	for i, ins := range insns {
		op := ins.OpCode
		if ins.IsFunctionCall() {
			return nil // a bpf-to-bpf call: pointers cross functions
		}
		if op.Class().IsJump() {
			switch op.JumpOp() {
			case asm.Exit:
				continue
			case asm.Call:
			default:
				t, ok := rawIdx[jumpTarget[i]]
				if !ok {
					return nil
				}
				succ[i] = append(succ[i], t)
				if op.JumpOp() == asm.Ja {
					continue
				}
			}
		}
		if i+1 < n {
			succ[i] = append(succ[i], i+1)
		}
	}
	in := make([]*stackState, n)
	start := stackState{}
	start[asm.R10] = stackVal{kind: vFP}
	in[0] = &start
	work := []int{0}
	for len(work) > 0 {
		i := work[len(work)-1]
		work = work[:len(work)-1]
		out, esc := stackStep(insns[i], *in[i])
		if esc {
			return nil
		}
		for _, s := range succ[i] {
			if in[s] == nil {
				c := out
				in[s] = &c
				work = append(work, s)
				continue
			}
			m := *in[s]
			for r := range m {
				m[r] = mergeVal(m[r], out[r])
			}
			if m != *in[s] {
				*in[s] = m
				work = append(work, s)
			}
		}
	}
	return &stackFlow{succ: succ, in: in}
}

// fpOff: the register holds the stack pointer plus a known offset, before
// instruction i.
func (f *stackFlow) fpOff(i int, r asm.Register) (int64, bool) {
	if f == nil || f.in[i] == nil || f.in[i][r].kind != vFP {
		return 0, false
	}
	return f.in[i][r].v, true
}

// constant: the register holds a known constant before instruction i.
func (f *stackFlow) constant(i int, r asm.Register) (int64, bool) {
	if f == nil || f.in[i] == nil || f.in[i][r].kind != vConst {
		return 0, false
	}
	return f.in[i][r].v, true
}

// deadStackStores returns the raw indices of the stores to the stack that
// no instruction reads afterwards (nil when f is: then every store is kept).
func deadStackStores(insns asm.Instructions, raw []int, f *stackFlow) map[int]bool {
	if f == nil {
		return nil
	}
	n, succ, in := len(insns), f.succ, f.in

	// Backward: the stack bytes read later, before each instruction.
	liveIn := make([]stackBytes, n)
	for changed := true; changed; {
		changed = false
		for i := n - 1; i >= 0; i-- {
			if in[i] == nil {
				continue // unreachable
			}
			var live stackBytes
			for _, s := range succ[i] {
				live.or(&liveIn[s])
			}
			if rd, wr, ok := stackAccess(insns[i], *in[i]); ok {
				if wr.n > 0 {
					live.set(wr.off, wr.n, false)
				}
				if rd.n > 0 {
					live.set(rd.off, rd.n, true)
				}
			} else {
				return nil
			}
			if live != liveIn[i] {
				liveIn[i] = live
				changed = true
			}
		}
	}
	dead := map[int]bool{}
	for i, ins := range insns {
		if in[i] == nil {
			continue
		}
		cls := ins.OpCode.Class()
		if (cls != asm.StClass && cls != asm.StXClass) || ins.OpCode.Mode() != asm.MemMode {
			continue
		}
		_, wr, _ := stackAccess(ins, *in[i])
		if wr.n == 0 {
			continue
		}
		var live stackBytes
		for _, s := range succ[i] {
			live.or(&liveIn[s])
		}
		if !live.any(wr.off, wr.n) {
			dead[raw[i]] = true
		}
	}
	return dead
}

// stackStep is the forward pass's transfer: the registers after ins, or
// escape when a stack pointer goes where the passes do not follow it.
func stackStep(ins asm.Instruction, st stackState) (stackState, bool) {
	op := ins.OpCode
	dst := ins.Dst
	switch cls := op.Class(); cls {
	case asm.ALU64Class:
		srcV := stackVal{kind: vConst, v: ins.Constant}
		if op.Source() == asm.RegSource {
			srcV = st[ins.Src]
		}
		d := st[dst]
		switch op.ALUOp() {
		case asm.Mov:
			st[dst] = srcV
			return st, false
		case asm.Add, asm.Sub:
			sign := int64(1)
			if op.ALUOp() == asm.Sub {
				sign = -1
			}
			switch {
			case d.kind == vFP && srcV.kind == vConst:
				st[dst] = stackVal{kind: vFP, v: d.v + sign*srcV.v}
				return st, false
			case isFP(d) || isFP(srcV):
				return st, true
			case d.kind == vConst && srcV.kind == vConst:
				st[dst] = stackVal{kind: vConst, v: d.v + sign*srcV.v}
				return st, false
			}
			st[dst] = stackVal{}
			return st, false
		}
		if isFP(d) || isFP(srcV) {
			return st, true
		}
		st[dst] = stackVal{}
	case asm.ALUClass:
		if isFP(st[dst]) || (op.Source() == asm.RegSource && isFP(st[ins.Src])) {
			return st, true
		}
		st[dst] = stackVal{}
		if op.ALUOp() == asm.Mov && op.Source() == asm.ImmSource {
			st[dst] = stackVal{kind: vConst, v: int64(uint32(ins.Constant))}
		}
	case asm.LdClass:
		st[dst] = stackVal{}
		if ins.IsConstantLoad(asm.DWord) && ins.Reference() == "" && !ins.IsLoadFromMap() {
			st[dst] = stackVal{kind: vConst, v: ins.Constant}
		}
	case asm.LdXClass:
		if st[ins.Src].kind == vFPAny {
			return st, true
		}
		st[dst] = stackVal{}
	case asm.StClass:
		if st[dst].kind == vFPAny {
			return st, true
		}
	case asm.StXClass:
		if isFP(st[ins.Src]) || st[dst].kind == vFPAny {
			return st, true // a stack pointer stored, or a store through an unknown one
		}
		if op.Mode() == asm.AtomicMode && ins.Constant&0x01 != 0 {
			// a fetch (xchg and cmpxchg among them): a register gets a value
			if ins.Constant == 0xf1 { // cmpxchg: r0
				st[asm.R0] = stackVal{}
			} else {
				st[ins.Src] = stackVal{}
			}
		}
	case asm.JumpClass, asm.Jump32Class:
		if op.JumpOp() == asm.Call {
			for r := asm.R1; r <= asm.R5; r++ {
				if st[r].kind == vFPAny {
					return st, true
				}
			}
			for r := asm.R0; r <= asm.R5; r++ {
				st[r] = stackVal{}
			}
		}
	}
	return st, false
}

// stackRange is a range of stack bytes: off from the top (negative), n bytes.
type stackRange struct{ off, n int64 }

// stackAccess: the stack bytes ins reads and writes, given the registers
// before it; ok false for an access the pass cannot bound (then nothing is
// removed).
func stackAccess(ins asm.Instruction, st stackState) (rd, wr stackRange, ok bool) {
	op := ins.OpCode
	within := func(r stackRange) bool { return r.off >= -StackSize && r.off+r.n <= 0 }
	switch cls := op.Class(); cls {
	case asm.LdXClass:
		if b := st[ins.Src]; b.kind == vFP {
			rd = stackRange{b.v + int64(ins.Offset), int64(op.Size().Sizeof())}
			return rd, wr, within(rd)
		}
	case asm.StClass, asm.StXClass:
		b := st[ins.Dst]
		if b.kind != vFP {
			return rd, wr, true
		}
		r := stackRange{b.v + int64(ins.Offset), int64(op.Size().Sizeof())}
		if !within(r) {
			return rd, wr, false
		}
		if op.Mode() == asm.AtomicMode {
			return r, stackRange{}, true // reads it too; not removed
		}
		return rd, r, true
	case asm.JumpClass, asm.Jump32Class:
		if op.JumpOp() != asm.Call || !ins.IsBuiltinCall() || noStackRead[ins.Constant] {
			return rd, wr, true
		}
		// a helper given a stack pointer reads from it to the top of the stack
		lo := int64(0)
		for r := asm.R1; r <= asm.R5; r++ {
			if b := st[r]; b.kind == vFP && b.v < lo {
				lo = b.v
			}
		}
		if lo < -StackSize {
			return rd, wr, false
		}
		return stackRange{lo, -lo}, wr, true
	}
	return rd, wr, true
}
