package ptx_test

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/gpubpf/ptx"
	"github.com/gpuext/gpuext/gpubpf/ptxinterp"
)

// TestGoldenTranslationTable pins the PTX of every instruction form the
// translator takes (testdata/table.ptx is the readable translation table;
// the semantics are checked against the kernel by gpubpf/difftest).
func TestGoldenTranslationTable(t *testing.T) {
	var insns asm.Instructions
	ops := []asm.ALUOp{asm.Add, asm.Sub, asm.Mul, asm.Div, asm.SDiv, asm.Or, asm.And, asm.LSh, asm.RSh, asm.Mod, asm.SMod, asm.Xor, asm.Mov, asm.ArSh}
	for _, op := range ops {
		insns = append(insns, op.Reg(asm.R1, asm.R2), op.Imm(asm.R1, -3), op.Reg32(asm.R1, asm.R2), op.Imm32(asm.R1, -3))
	}
	insns = append(insns,
		asm.Neg.Imm(asm.R1, 0), asm.Neg.Imm32(asm.R1, 0),
		asm.MovSX8.Reg(asm.R1, asm.R2), asm.MovSX16.Reg(asm.R1, asm.R2), asm.MovSX32.Reg(asm.R1, asm.R2),
		asm.MovSX8.Reg32(asm.R1, asm.R2), asm.MovSX16.Reg32(asm.R1, asm.R2),
		asm.BSwap(asm.R1, asm.Half), asm.BSwap(asm.R1, asm.Word), asm.BSwap(asm.R1, asm.DWord),
		asm.HostTo(asm.BE, asm.R1, asm.Word), asm.HostTo(asm.LE, asm.R1, asm.Half),
		asm.LoadImm(asm.R3, -1<<63, asm.DWord),
		asm.LoadMem(asm.R1, asm.RFP, -8, asm.Byte), asm.LoadMemSX(asm.R1, asm.RFP, -8, asm.Half),
		asm.StoreMem(asm.RFP, -8, asm.R1, asm.DWord), asm.StoreImm(asm.RFP, -4, -1, asm.Word),
		// read back: a store nothing reads is not emitted (deadstore.go)
		asm.LoadMem(asm.R1, asm.RFP, -8, asm.DWord),
	)
	for _, op := range []asm.AtomicOp{asm.AddAtomic, asm.FetchAnd, asm.Xchg, asm.CmpXchg} {
		insns = append(insns, op.Mem(asm.R2, asm.R1, asm.DWord, 8), op.Mem(asm.R2, asm.R1, asm.Word, 4))
	}
	for _, op := range []asm.JumpOp{asm.JEq, asm.JGT, asm.JSet, asm.JSLT} {
		insns = append(insns, op.Reg(asm.R1, asm.R2, "end"), op.Imm(asm.R1, -5, "end"), op.Reg32(asm.R1, asm.R2, "end"), op.Imm32(asm.R1, -5, "end"))
	}
	insns = append(insns, asm.Mov.Imm(asm.R0, 0).WithSymbol("end"), asm.Return())
	spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{"table": {Name: "table", Instructions: insns}}}
	m, err := ptx.Translate(spec, nil, ptx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "table.ptx", m.PTX)
	if _, err := ptxinterp.Load(m.Standalone("7.0", 70)); err != nil {
		t.Errorf("the interpreter does not take the table: %v", err)
	}
}
