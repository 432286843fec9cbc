package ptx_test

import (
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/ptx"
)

func TestLeaderOnly(t *testing.T) {
	linear := asm.BuiltinFunc(abi.HelperThreadLinearID).Call()
	lane := asm.BuiltinFunc(abi.HelperLaneID).Call()
	out := func() asm.Instructions {
		return asm.Instructions{asm.Mov.Imm(asm.R0, 0).WithSymbol("out"), asm.Return()}
	}
	count := asm.Instructions{ // *lookup(map, &0) += 1, through the helper
		asm.StoreImm(asm.R10, -8, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, 0).WithReference("m"),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -8),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Imm(asm.R1, 1),
		asm.AddAtomic.Mem(asm.R0, asm.R1, asm.DWord, 0),
	}
	cat := func(parts ...asm.Instructions) asm.Instructions {
		var r asm.Instructions
		for _, p := range parts {
			r = append(r, p...)
		}
		return r
	}
	for name, tc := range map[string]struct {
		insns asm.Instructions
		want  bool
	}{
		"clang shape: stack store, id, jne": {cat(asm.Instructions{
			asm.Mov.Imm(asm.R1, 0), asm.StoreMem(asm.R10, -4, asm.R1, asm.Word),
			linear, asm.JNE.Imm(asm.R0, 0, "out")}, count, out()), true},
		"id copied and zero-extended, 32-bit jump": {cat(asm.Instructions{
			linear, asm.Mov.Reg(asm.R6, asm.R0), asm.LSh.Imm(asm.R6, 32), asm.RSh.Imm(asm.R6, 32),
			asm.JNE.Imm32(asm.R6, 0, "out")}, count, out()), true},
		"jeq: the fall-through is the non-leader side": {cat(asm.Instructions{
			linear, asm.JEq.Imm(asm.R0, 0, "work"), asm.Ja.Label("out"),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("work")}, count, out()), true},
		"non-leader side reads the timer and exits": {cat(asm.Instructions{
			linear, asm.JNE.Imm(asm.R0, 0, "idle")}, count, out(), asm.Instructions{
			asm.BuiltinFunc(abi.HelperGlobaltimer).Call().WithSymbol("idle"), asm.Return()}), true},
		"no guard":                 {cat(count, out()), false},
		"lane guard is per warp":   {cat(asm.Instructions{lane, asm.JNE.Imm(asm.R0, 0, "out")}, count, out()), false},
		"side effect before guard": {cat(count, asm.Instructions{linear, asm.JNE.Imm(asm.R0, 0, "out")}, count, out()), false},
		"guard on something else": {cat(asm.Instructions{
			linear, asm.Mov.Imm(asm.R0, 1), asm.JNE.Imm(asm.R0, 0, "out")}, count, out()), false},
		"id arithmetic is not the id": {cat(asm.Instructions{
			linear, asm.Add.Imm(asm.R0, -1), asm.JNE.Imm(asm.R0, 0, "out")}, count, out()), false},
		"guard the wrong way round": {cat(asm.Instructions{
			linear, asm.JEq.Imm(asm.R0, 0, "out")}, count, out()), false},
		"non-leader side has a side effect": {cat(asm.Instructions{
			linear, asm.JNE.Imm(asm.R0, 0, "other")}, out(), cat(asm.Instructions{
			asm.StoreImm(asm.R10, -8, 0, asm.Word).WithSymbol("other")}, count[1:], asm.Instructions{asm.Return()})), false},
		"compared with a register": {cat(asm.Instructions{
			linear, asm.Mov.Imm(asm.R1, 0), asm.JNE.Reg(asm.R0, asm.R1, "out")}, count, out()), false},
	} {
		if got := ptx.LeaderOnly(tc.insns); got != tc.want {
			t.Errorf("%s: LeaderOnly = %v, want %v\n%v", name, got, tc.want, tc.insns)
		}
	}
}
