package verifier

import (
	"fmt"

	"github.com/cilium/ebpf/asm"
)

// cfg is the control-flow graph over raw instruction indices (an ld_imm64
// takes two), with the checks that need no values: jumps in range, no
// falling off the end, no unreachable insn, every insn reaches an exit.
type cfg struct {
	n      int
	ins    []*asm.Instruction // by raw index; nil on the second half of ld_imm64
	succ   [][]int
	target []bool // a jump lands here: paths join (checkpoints)
	ipdom  []int  // immediate post-dominator, -1 = the exit
	wsets  map[int]*writeSet
	// mayStack[pc]: registers that may hold a stack pointer before pc runs
	// (a flow-insensitive over-approximation, for write sets).
	mayStack []uint16
	// live[pc]: registers some path from pc may read before writing them.
	// Pruning ignores the others.
	live []uint16
}

// writeSet is what the insns of a divergent region may write: the lanes
// that skipped those insns hold other values there after reconvergence.
type writeSet struct {
	regs     uint16
	slots    uint64 // stack slots written through r10
	indirect bool   // a store through another pointer (may hit any slot)
}

// jumpTarget is the raw index a jump at pc goes to.
func jumpTarget(pc int, ins *asm.Instruction) int {
	if ins.OpCode.Class() == asm.Jump32Class && ins.OpCode.JumpOp() == asm.Ja {
		return pc + 1 + int(int32(ins.Constant))
	}
	return pc + 1 + int(ins.Offset)
}

// width is how many raw slots ins takes.
func width(ins *asm.Instruction) int {
	if ins.OpCode.IsDWordLoad() {
		return 2
	}
	return 1
}

func buildCFG(insns asm.Instructions) (*cfg, *cfgError) {
	// Jumps built with asm labels (tests) still carry Offset -1 and a
	// Reference: resolve them against the symbols.
	syms := map[string]int{}
	pc := 0
	for i := range insns {
		if s := insns[i].Symbol(); s != "" {
			syms[s] = pc
		}
		pc += width(&insns[i])
	}
	g := &cfg{n: pc, ins: make([]*asm.Instruction, pc), wsets: map[int]*writeSet{}}
	pc = 0
	for i := range insns {
		ins := &insns[i]
		if ins.OpCode.Class().IsJump() && ins.Offset == -1 && ins.Reference() != "" && !ins.IsFunctionCall() {
			if t, ok := syms[ins.Reference()]; ok {
				c := *ins
				c.Offset = int16(t - pc - 1)
				ins = &c
			}
		}
		g.ins[pc] = ins
		pc += width(ins)
	}
	if g.n == 0 {
		return nil, &cfgError{0, "empty program", nil}
	}
	g.succ = make([][]int, g.n)
	g.target = make([]bool, g.n)
	hasExit := false
	for pc, ins := range g.ins {
		if ins == nil {
			continue
		}
		if ins.OpCode == asm.InvalidOpCode {
			return nil, &cfgError{pc, "invalid opcode", nil}
		}
		next := pc + 1
		if ins.OpCode.IsDWordLoad() {
			next = pc + 2
		}
		var succ []int
		fall := true
		if ins.OpCode.Class().IsJump() {
			switch op := ins.OpCode.JumpOp(); op {
			case asm.Exit:
				fall = false
				hasExit = true
			case asm.Call:
				if ins.IsFunctionCall() {
					return nil, &cfgError{pc, fmt.Sprintf("call to BPF function %q: device probes are one function; mark it static __always_inline", ins.Reference()), nil}
				}
			case asm.Ja:
				fall = false
				succ = append(succ, jumpTarget(pc, ins))
			case asm.InvalidJumpOp, asm.JCOND:
				return nil, &cfgError{pc, fmt.Sprintf("unsupported jump %v", ins.OpCode), nil}
			default:
				succ = append(succ, jumpTarget(pc, ins))
			}
			for _, t := range succ {
				if t < 0 || t >= g.n {
					return nil, &cfgError{pc, fmt.Sprintf("jump out of range: target insn %d, program has %d", t, g.n), nil}
				}
				if g.ins[t] == nil {
					return nil, &cfgError{pc, fmt.Sprintf("jump into the middle of ld_imm64 at insn %d", t-1), nil}
				}
				g.target[t] = true
			}
		}
		if fall {
			if next >= g.n {
				return nil, &cfgError{pc, "falls off the end of the program: last insn is not exit or jump", nil}
			}
			succ = append([]int{next}, succ...)
		}
		if len(succ) == 2 && succ[0] == succ[1] {
			succ = succ[:1]
		}
		g.succ[pc] = succ
	}
	if !hasExit {
		return nil, &cfgError{g.n - 1, "no exit instruction", nil}
	}
	// Reachability from insn 0.
	seen := make([]bool, g.n)
	stack := []int{0}
	seen[0] = true
	for len(stack) > 0 {
		pc := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, s := range g.succ[pc] {
			if !seen[s] {
				seen[s] = true
				stack = append(stack, s)
			}
		}
	}
	for pc, ins := range g.ins {
		if ins != nil && !seen[pc] {
			return nil, &cfgError{pc, "unreachable insn", nil}
		}
	}
	if e := g.postDominators(); e != nil {
		return nil, e
	}
	g.stackPointers()
	g.liveness()
	return g, nil
}

// useDef is what insn reads and writes among r0-r10.
func useDef(ins *asm.Instruction) (use, def uint16) {
	cls := ins.OpCode.Class()
	d, s := uint16(1)<<ins.Dst, uint16(1)<<ins.Src
	regSrc := ins.OpCode.Source() == asm.RegSource
	switch {
	case cls.IsALU():
		if ins.OpCode.ALUOp()&^0x0300 != asm.Mov || ins.OpCode.ALUOp() == asm.Swap {
			use |= d
		}
		if regSrc && ins.OpCode.ALUOp() != asm.Swap {
			use |= s
		}
		def = d
	case cls == asm.LdXClass:
		use, def = s, d
	case cls == asm.LdClass:
		def = d
	case cls == asm.StClass:
		use = d
	case cls == asm.StXClass:
		use = d | s
		if ins.OpCode.Mode() == asm.AtomicMode {
			use |= 1 // cmpxchg compares r0
			def = s | 1
		}
	case cls.IsJump():
		switch ins.OpCode.JumpOp() {
		case asm.Exit:
			use = 1
		case asm.Call:
			use, def = 0x3e, 0x3f
		case asm.Ja:
		default:
			use = d
			if regSrc {
				use |= s
			}
		}
	}
	return use, def
}

// liveness is the backward dataflow of live registers, to a fixpoint.
func (g *cfg) liveness() {
	g.live = make([]uint16, g.n)
	for changed := true; changed; {
		changed = false
		for pc := g.n - 1; pc >= 0; pc-- {
			ins := g.ins[pc]
			if ins == nil {
				continue
			}
			var out uint16
			for _, s := range g.succ[pc] {
				out |= g.live[s]
			}
			use, def := useDef(ins)
			in := use | out&^def
			if in != g.live[pc] {
				g.live[pc] = in
				changed = true
			}
		}
	}
}

// stackPointers computes mayStack by a forward dataflow to a fixpoint:
// r10 is a stack pointer, a move or constant add/sub keeps one, a load from
// the stack may return a spilled one (if any insn spills one), everything
// else writes a non-pointer or some other pointer.
func (g *cfg) stackPointers() {
	const fp = 1 << asm.R10
	g.mayStack = make([]uint16, g.n)
	spilled := false
	for changed := true; changed; {
		changed = false
		for i := range g.mayStack {
			g.mayStack[i] = 0
		}
		g.mayStack[0] = fp
		work := []int{0}
		queued := make([]bool, g.n)
		queued[0] = true
		for len(work) > 0 {
			pc := work[len(work)-1]
			work = work[:len(work)-1]
			queued[pc] = false
			in := g.mayStack[pc] | fp
			out := in
			ins := g.ins[pc]
			cls := ins.OpCode.Class()
			dst := uint16(1) << ins.Dst
			switch {
			case cls.IsALU():
				op := ins.OpCode.ALUOp()
				src := ins.OpCode.Source() == asm.RegSource
				switch {
				case op == asm.Mov && src && cls == asm.ALU64Class:
					out = out&^dst | (in>>ins.Src&1)<<ins.Dst
				case (op == asm.Add || op == asm.Sub) && cls == asm.ALU64Class:
					if src && in&(1<<ins.Src) != 0 {
						out |= dst
					}
				default:
					out &^= dst
				}
			case cls == asm.LdXClass:
				if spilled && in&(1<<ins.Src) != 0 {
					out |= dst
				} else {
					out &^= dst
				}
			case cls == asm.LdClass:
				out &^= dst
			case cls == asm.StXClass:
				if in&(1<<ins.Src) != 0 && ins.OpCode.Mode() == asm.MemMode && !spilled {
					spilled = true
					changed = true
				}
				if ins.OpCode.Mode() == asm.AtomicMode {
					out &^= 1<<ins.Src | 1
				}
			case cls.IsJump() && ins.OpCode.JumpOp() == asm.Call:
				out &^= 0x3f
			}
			out |= fp
			for _, s := range g.succ[pc] {
				if g.mayStack[s]|out != g.mayStack[s] {
					g.mayStack[s] |= out
					if !queued[s] {
						queued[s] = true
						work = append(work, s)
					}
				}
			}
		}
	}
}

type cfgError struct {
	pc   int
	msg  string
	kind error // nil: ErrProgram
}

// postDominators computes ipdom over the reverse graph (Cooper, Harvey and
// Kennedy's iterative scheme), exit being node n.
func (g *cfg) postDominators() *cfgError {
	exit := g.n
	preds := make([][]int, g.n+1) // reverse-graph successors: forward predecessors
	for pc, ss := range g.succ {
		if g.ins[pc] == nil {
			continue
		}
		if len(ss) == 0 {
			preds[exit] = append(preds[exit], pc)
		}
		for _, s := range ss {
			preds[s] = append(preds[s], pc)
		}
	}
	// Post-order of the reverse graph from exit.
	order := make([]int, g.n+1)
	for i := range order {
		order[i] = -1
	}
	var post []int
	type frame struct{ node, i int }
	st := []frame{{exit, 0}}
	order[exit] = -2
	for len(st) > 0 {
		f := &st[len(st)-1]
		if f.i < len(preds[f.node]) {
			p := preds[f.node][f.i]
			f.i++
			if order[p] == -1 {
				order[p] = -2
				st = append(st, frame{p, 0})
			}
			continue
		}
		order[f.node] = len(post)
		post = append(post, f.node)
		st = st[:len(st)-1]
	}
	for pc, ins := range g.ins {
		if ins != nil && order[pc] < 0 {
			return &cfgError{pc, "unbounded loop: no path from this insn to exit", ErrUnboundedLoop}
		}
	}
	idom := make([]int, g.n+1)
	for i := range idom {
		idom[i] = -1
	}
	idom[exit] = exit
	intersect := func(a, b int) int {
		for a != b {
			for order[a] < order[b] {
				a = idom[a]
			}
			for order[b] < order[a] {
				b = idom[b]
			}
		}
		return a
	}
	for changed := true; changed; {
		changed = false
		for i := len(post) - 2; i >= 0; i-- { // reverse post-order, exit first
			b := post[i]
			nd := -1
			ss := g.succ[b]
			if len(ss) == 0 {
				nd = exit
			}
			for _, s := range ss {
				if idom[s] == -1 {
					continue
				}
				if nd == -1 {
					nd = s
				} else {
					nd = intersect(s, nd)
				}
			}
			if nd != -1 && idom[b] != nd {
				idom[b] = nd
				changed = true
			}
		}
	}
	g.ipdom = make([]int, g.n)
	for pc := range g.ipdom {
		g.ipdom[pc] = idom[pc]
		if idom[pc] == exit {
			g.ipdom[pc] = -1
		}
	}
	return nil
}

// writeSetOf is what the region from branch b to its post-dominator may
// write.
func (g *cfg) writeSetOf(b int) *writeSet {
	if w, ok := g.wsets[b]; ok {
		return w
	}
	w := &writeSet{}
	stop := g.ipdom[b]
	seen := map[int]bool{}
	var stack []int
	for _, s := range g.succ[b] {
		if s != stop && !seen[s] {
			seen[s] = true
			stack = append(stack, s)
		}
	}
	for len(stack) > 0 {
		pc := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		ins := g.ins[pc]
		cls := ins.OpCode.Class()
		switch {
		case cls.IsALU() || cls == asm.LdXClass || ins.OpCode.IsDWordLoad():
			w.regs |= 1 << ins.Dst
		case cls.IsJump() && ins.OpCode.JumpOp() == asm.Call:
			w.regs |= 0x3f // r0-r5
			if ins.IsBuiltinCall() && writesThroughArgs(int32(ins.Constant)) {
				w.indirect = true // bpftime's id helpers store through r1-r3
			}
		case cls.IsStore():
			if ins.Dst == asm.R10 {
				off := int(ins.Offset) + stackSize
				if off >= 0 && off < stackSize {
					w.slots |= 1 << (off / 8)
				}
			} else if g.mayStack[pc]&(1<<ins.Dst) != 0 {
				w.indirect = true
			}
			if ins.OpCode.Mode() == asm.AtomicMode {
				w.regs |= 1<<ins.Src | 1 // fetch variants write src, cmpxchg r0
			}
		}
		for _, s := range g.succ[pc] {
			if s != stop && !seen[s] {
				seen[s] = true
				stack = append(stack, s)
			}
		}
	}
	g.wsets[b] = w
	return w
}
