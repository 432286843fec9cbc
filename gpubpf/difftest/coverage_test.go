package difftest_test

import (
	"fmt"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/gpubpf/difftest"
)

// coverageKey names what an instruction exercises.
func coverageKey(ins asm.Instruction) string {
	if ins.IsFunctionCall() {
		return "bpf-to-bpf call"
	}
	op := ins.OpCode
	src := "imm"
	if op.Source() == asm.RegSource {
		src = "reg"
	}
	switch cls := op.Class(); cls {
	case asm.ALU64Class, asm.ALUClass:
		if op.ALUOp() == asm.Swap {
			return fmt.Sprintf("%v swap %v %d", cls, op.Endianness(), ins.Constant)
		}
		return fmt.Sprintf("%v %v %s", cls, op.ALUOp(), src)
	case asm.JumpClass, asm.Jump32Class:
		return fmt.Sprintf("%v %v %s", cls, op.JumpOp(), src)
	case asm.StXClass:
		if op.Mode() == asm.AtomicMode {
			return fmt.Sprintf("atomic %v %v", op.AtomicOp(), op.Size())
		}
	}
	return fmt.Sprintf("%v %v %v", op.Class(), op.Mode(), op.Size())
}

// TestCorpusCoverage: the corpus exercises every ALU op in both widths and
// both source kinds, every condition of JMP and JMP32, every atomic in both
// sizes, sign-extending loads, all store widths, byte swaps and
// bpf-to-bpf calls.
func TestCorpusCoverage(t *testing.T) {
	seen := map[string]int{}
	for _, c := range difftest.Corpus(0) {
		for _, ins := range c.Spec.Programs[difftest.ProgName].Instructions {
			seen[coverageKey(ins)]++
		}
	}
	var want []string
	for _, cls := range []asm.Class{asm.ALU64Class, asm.ALUClass} {
		for _, op := range []asm.ALUOp{asm.Add, asm.Sub, asm.Mul, asm.Div, asm.SDiv, asm.Or, asm.And, asm.LSh, asm.RSh, asm.Mod, asm.SMod, asm.Xor, asm.Mov, asm.ArSh} {
			for _, src := range []string{"imm", "reg"} {
				want = append(want, fmt.Sprintf("%v %v %s", cls, op, src))
			}
		}
		want = append(want, fmt.Sprintf("%v %v imm", cls, asm.Neg), fmt.Sprintf("%v %v reg", cls, asm.MovSX8), fmt.Sprintf("%v %v reg", cls, asm.MovSX16))
		for _, n := range []int{16, 32, 64} {
			want = append(want, fmt.Sprintf("%v swap %v %d", cls, asm.LE, n))
		}
	}
	want = append(want, fmt.Sprintf("%v %v reg", asm.ALU64Class, asm.MovSX32))
	for _, n := range []int{16, 32, 64} {
		want = append(want, fmt.Sprintf("%v swap %v %d", asm.ALUClass, asm.BE, n))
	}
	for _, cls := range []asm.Class{asm.JumpClass, asm.Jump32Class} {
		for _, op := range []asm.JumpOp{asm.JEq, asm.JGT, asm.JGE, asm.JSet, asm.JNE, asm.JSGT, asm.JSGE, asm.JLT, asm.JLE, asm.JSLT, asm.JSLE} {
			for _, src := range []string{"imm", "reg"} {
				want = append(want, fmt.Sprintf("%v %v %s", cls, op, src))
			}
		}
	}
	for _, op := range []asm.AtomicOp{asm.AddAtomic, asm.FetchAdd, asm.AndAtomic, asm.FetchAnd, asm.OrAtomic, asm.FetchOr, asm.XorAtomic, asm.FetchXor, asm.Xchg, asm.CmpXchg} {
		for _, sz := range []asm.Size{asm.Word, asm.DWord} {
			want = append(want, fmt.Sprintf("atomic %v %v", op, sz))
		}
	}
	for _, sz := range []asm.Size{asm.Byte, asm.Half, asm.Word, asm.DWord} {
		want = append(want, fmt.Sprintf("%v %v %v", asm.LdXClass, asm.MemMode, sz),
			fmt.Sprintf("%v %v %v", asm.StXClass, asm.MemMode, sz),
			fmt.Sprintf("%v %v %v", asm.StClass, asm.MemMode, sz))
		if sz != asm.DWord {
			want = append(want, fmt.Sprintf("%v %v %v", asm.LdXClass, asm.MemSXMode, sz))
		}
	}
	want = append(want, "bpf-to-bpf call")
	for _, w := range want {
		if seen[w] == 0 {
			t.Errorf("the corpus never exercises %s", w)
		}
	}
}
