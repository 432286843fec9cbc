package ptx

import (
	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/gpubpf/abi"
)

// LeaderOnly reports whether a program acts only in the thread whose
// linear id in the block is 0: every other thread leaves it without a side
// effect (its return value is ignored by the dispatch). The patcher may
// then let only that thread run the attach point (module.conf guard_*).
//
// It recognises the shape clang gives `if (gpuext_thread_linear_id() != 0)
// return 0;` at the top of a program, and is conservative: a straight-line
// prefix without side effects (register ALU, loads, stores to the stack
// through r10, pure special-register helpers), the call to
// thread_linear_id, optionally copies of its result (including the
// zero-extension pair <<32 >>32 and 32-bit moves), then a branch on
// "id != 0" (or "id == 0", or unsigned "id > 0") against the immediate 0;
// and from the non-leader side, every reachable instruction is without a
// side effect up to exit. Anything else - a bpf-to-bpf call, a map helper,
// an atomic, a store not through r10, a jump before the guard - is "no".
func LeaderOnly(insns asm.Instructions) bool {
	target := indexInsns(insns).target

	// id[r]: 1 = r holds the linear id, 2 = the linear id << 32.
	var id [11]int
	for i := 0; i < len(insns); i++ {
		ins := insns[i]
		op := ins.OpCode
		cls := op.Class()
		if cls.IsJump() {
			jop := op.JumpOp()
			switch {
			case jop == asm.Call && ins.IsBuiltinCall() && ins.Constant == abi.HelperThreadLinearID:
				for r := 0; r <= 5; r++ {
					id[r] = 0
				}
				id[0] = 1
				continue
			case jop == asm.Call && ins.IsBuiltinCall() && pureHelper(ins.Constant):
				for r := 0; r <= 5; r++ {
					id[r] = 0
				}
				continue
			case jop == asm.Call || jop == asm.Exit || jop == asm.Ja:
				return false
			}
			// A conditional jump: it must be the guard.
			if op.Source() != asm.ImmSource || ins.Constant != 0 || ins.Dst > asm.R9 || id[ins.Dst] != 1 {
				return false
			}
			tgt, ok := target(i)
			if !ok {
				return false
			}
			switch jop {
			case asm.JNE, asm.JGT:
				return sideEffectFree(insns, tgt, target)
			case asm.JEq, asm.JLE:
				return sideEffectFree(insns, i+1, target)
			}
			return false
		}
		if !pureInsn(ins) {
			return false
		}
		// Track the id through copies; any other write forgets it.
		switch cls {
		case asm.ALU64Class, asm.ALUClass:
			d := ins.Dst
			if d > asm.R9 {
				return false
			}
			prev := id[d]
			id[d] = 0
			aop := op.ALUOp()
			switch {
			case aop == asm.Mov && op.Source() == asm.RegSource && ins.Src <= asm.R10:
				if s := id[ins.Src]; s == 1 || (s == 2 && cls == asm.ALU64Class) {
					id[d] = s
				}
			case cls == asm.ALU64Class && aop == asm.LSh && op.Source() == asm.ImmSource && ins.Constant == 32 && prev == 1:
				id[d] = 2
			case cls == asm.ALU64Class && aop == asm.RSh && op.Source() == asm.ImmSource && ins.Constant == 32 && prev == 2:
				id[d] = 1
			case cls == asm.ALU64Class && aop == asm.And && op.Source() == asm.ImmSource && ins.Constant == -1 && prev == 1:
				id[d] = 1
			}
		case asm.LdClass, asm.LdXClass:
			if ins.Dst <= asm.R10 {
				id[ins.Dst] = 0
			}
		}
	}
	return false
}

// pureHelper: a builtin that only reads special registers.
// insnIndex maps a program's instructions to their raw offsets (a dword
// load takes two) and back, for following jumps.
type insnIndex struct {
	insns   asm.Instructions
	raw     []int          // index -> raw offset
	at      map[int]int    // raw offset -> index
	symbols map[string]int // label -> raw offset
}

func indexInsns(insns asm.Instructions) insnIndex {
	ix := insnIndex{insns: insns, raw: make([]int, len(insns)), at: map[int]int{}, symbols: map[string]int{}}
	pos := 0
	for i, ins := range insns {
		ix.raw[i] = pos
		ix.at[pos] = i
		if s := ins.Symbol(); s != "" {
			ix.symbols[s] = pos
		}
		pos += int(ins.Width())
	}
	return ix
}

// target is the index a jump at index i goes to.
func (ix insnIndex) target(i int) (int, bool) {
	ins := ix.insns[i]
	var tgt int
	if ref := ins.Reference(); ref != "" {
		p, ok := ix.symbols[ref]
		if !ok {
			return 0, false
		}
		tgt = p
	} else if ins.OpCode.Class() == asm.Jump32Class && ins.OpCode.JumpOp() == asm.Ja {
		tgt = ix.raw[i] + 1 + int(ins.Constant)
	} else {
		tgt = ix.raw[i] + 1 + int(ins.Offset)
	}
	j, ok := ix.at[tgt]
	return j, ok
}

func pureHelper(id int64) bool {
	switch id {
	case abi.HelperKtimeGetNs, abi.HelperSmpProcessorID, abi.HelperThreadIdx, abi.HelperBlockIdx,
		abi.HelperBlockDim, abi.HelperGridDim, abi.HelperWarpID, abi.HelperLaneID, abi.HelperSmID,
		abi.HelperGlobaltimer, abi.HelperBlockLinearID, abi.HelperThreadLinearID:
		return true
	}
	return false
}

// pureInsn: a non-jump instruction without an effect outside the thread's
// registers and its own stack.
func pureInsn(ins asm.Instruction) bool {
	op := ins.OpCode
	switch op.Class() {
	case asm.ALU64Class, asm.ALUClass, asm.LdXClass:
		return true
	case asm.LdClass:
		return op.IsDWordLoad()
	case asm.StClass, asm.StXClass:
		return op.Mode() == asm.MemMode && ins.Dst == asm.R10
	}
	return false
}

// sideEffectFree: every instruction reachable from index start is pure
// (jumps, exits and pure helpers included) - the path a non-leader thread
// takes changes nothing but registers and its stack.
func sideEffectFree(insns asm.Instructions, start int, target func(int) (int, bool)) bool {
	seen := map[int]bool{}
	work := []int{start}
	for len(work) > 0 {
		i := work[len(work)-1]
		work = work[:len(work)-1]
		if i < 0 || i >= len(insns) {
			return false
		}
		if seen[i] {
			continue
		}
		seen[i] = true
		ins := insns[i]
		op := ins.OpCode
		if !op.Class().IsJump() {
			if !pureInsn(ins) {
				return false
			}
			work = append(work, i+1)
			continue
		}
		switch jop := op.JumpOp(); {
		case jop == asm.Exit:
			continue
		case jop == asm.Call:
			if !ins.IsBuiltinCall() || !pureHelper(ins.Constant) {
				return false
			}
			work = append(work, i+1)
		case jop == asm.Ja:
			t, ok := target(i)
			if !ok {
				return false
			}
			work = append(work, t)
		default:
			t, ok := target(i)
			if !ok {
				return false
			}
			work = append(work, t, i+1)
		}
	}
	return true
}
