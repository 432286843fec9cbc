package verifier

import (
	"errors"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/gpubpf/abi"
)

// The result says what the program uses: insns, stack, helpers, maps, the
// loop it proved bounded and how much it explored.
func TestResult(t *testing.T) {
	p := prog(uniformLookup("arr", asm.R6), is(
		asm.Mov.Imm(asm.R7, 0),
		asm.Add.Imm(asm.R7, 1).WithSymbol("top"),
		asm.JLT.Imm(asm.R7, 10, "top"),
		asm.StoreMem(asm.R10, -24, asm.R7, asm.DWord),
		call(abi.HelperLaneID),
		asm.JNE.Imm(asm.R0, 0, "out"),
		asm.StoreMem(asm.R6, 0, asm.R7, asm.DWord)), ret("out"))
	res, err := Verify(&ebpf.ProgramSpec{Name: "loop", Instructions: p}, simtMaps, abi.KernelExit)
	if err != nil {
		t.Fatal(err)
	}
	if res.Prog != "loop" || res.Attach != abi.KernelExit || res.Insns != len(p)+1 {
		t.Errorf("identity %+v, want %d insns", res, len(p)+1)
	}
	if res.MaxStack != 24 {
		t.Errorf("max stack %d, want 24", res.MaxStack)
	}
	if strings.Join(res.Helpers, ",") != "gpuext_lane_id,map_lookup_elem" || strings.Join(res.Maps, ",") != "arr" {
		t.Errorf("helpers %v maps %v", res.Helpers, res.Maps)
	}
	if res.Loops != 1 || res.States < 30 {
		t.Errorf("loops %d states %d: the 10-iteration loop was not explored", res.Loops, res.States)
	}
}

// An error names the program and insn, and without line info says no more.
func TestErrorFormat(t *testing.T) {
	_, err := Verify(&ebpf.ProgramSpec{Name: "p", Instructions: is(asm.Mov.Imm(asm.R0, 0), asm.Mov.Reg(asm.R0, asm.R4), asm.Return())}, nil, abi.KernelEntry)
	want := "prog p: insn 1: r4 is read before it is written (uninitialised register)"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	e := &Error{Prog: "count_entry", Insn: 12, Source: "probe.bpf.c:34", Line: "n = *p;", Msg: "unbounded loop: back-edge to insn 7 not proven bounded"}
	if got := e.Error(); got != `prog count_entry: insn 12 (probe.bpf.c:34 "n = *p;"): unbounded loop: back-edge to insn 7 not proven bounded` {
		t.Fatalf("format: %s", got)
	}
}

func TestUnsupportedAttach(t *testing.T) {
	_, err := Verify(&ebpf.ProgramSpec{Name: "p", Instructions: is(asm.Mov.Imm(asm.R0, 0), asm.Return())}, nil, abi.Attach(7))
	if !errors.Is(err, ErrUnsupportedAttach) {
		t.Fatalf("got %v", err)
	}
}

// The ctx the verifier allows reads of is struct gpuext_probe_ctx: four
// fields covering its abi.CtxSize bytes.
func TestCtxFields(t *testing.T) {
	want := []struct{ off, size int64 }{{0, 8}, {8, 4}, {12, 4}, {16, 8}}
	if len(ctxFields) != len(want) {
		t.Fatalf("ctx fields %v, want %v", ctxFields, want)
	}
	for i := range want {
		if ctxFields[i] != want[i] {
			t.Fatalf("ctx fields %v, want %v", ctxFields, want)
		}
	}
	if last := ctxFields[len(ctxFields)-1]; last.off+last.size != abi.CtxSize {
		t.Fatalf("ctx fields end at %d, CtxSize is %d", last.off+last.size, abi.CtxSize)
	}
}
