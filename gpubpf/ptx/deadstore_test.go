package ptx_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/ptx"
)

// droppedStores translates one bpftime-style program (after r7 = 1, the
// value its 8-byte stores store) and returns the indices in insns of the
// stores the translation left out, in order.
func droppedStores(t *testing.T, insns asm.Instructions) []int {
	t.Helper()
	spec := &ebpf.CollectionSpec{
		Maps:     map[string]*ebpf.MapSpec{"m": {Name: "m", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 4}},
		Programs: map[string]*ebpf.ProgramSpec{"p": {Name: "p", SectionName: "kprobe/_Z4gridPj", Instructions: append(asm.Instructions{asm.Mov.Imm(asm.R7, 1)}, insns...)}},
	}
	m, err := ptx.Translate(spec, nil, ptx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	last := -1
	at := regexp.MustCompile(`^\t// (\d+): `)
	for _, l := range strings.Split(m.PTX, "\n") {
		if s := at.FindStringSubmatch(l); s != nil {
			fmt.Sscan(s[1], &last)
		}
		if strings.Contains(l, "a stack store nothing reads") {
			got = append(got, last-1)
		}
	}
	return got
}

// A store only a dropped helper reads (bpf_printk's format string) is left
// out; one a load, a kept helper or another path reads stays; where the
// stack's pointer goes somewhere the analysis does not follow, every store
// stays.
func TestDeadStackStores(t *testing.T) {
	printk := asm.FnTracePrintk
	for _, tc := range []struct {
		name  string
		insns asm.Instructions
		want  []int
	}{
		{"format string of a dropped printk", asm.Instructions{
			asm.StoreMem(asm.RFP, -16, asm.R7, asm.DWord), // 0
			asm.StoreMem(asm.RFP, -8, asm.R7, asm.DWord),  // 1
			asm.Mov.Reg(asm.R1, asm.RFP),                  // 2
			asm.Add.Imm(asm.R1, -16),                      // 3
			asm.Mov.Imm(asm.R2, 16),                       // 4
			printk.Call(),                                 // 5
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		}, []int{0, 1}},
		{"a lookup's key", asm.Instructions{
			asm.StoreImm(asm.RFP, -4, 1, asm.Word), // 0
			asm.LoadMapPtr(asm.R1, 0).WithReference("m"),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		}, nil},
		{"overwritten before it is read", asm.Instructions{
			asm.StoreMem(asm.RFP, -8, asm.R7, asm.DWord), // 0: dead
			asm.StoreMem(asm.RFP, -8, asm.R7, asm.DWord), // 1
			asm.LoadMem(asm.R0, asm.RFP, -8, asm.DWord),
			asm.Return(),
		}, []int{0}},
		{"read on one path only", asm.Instructions{
			asm.StoreMem(asm.RFP, -8, asm.R7, asm.DWord), // 0
			asm.JEq.Imm(asm.R1, 0, "out"),
			asm.LoadMem(asm.R0, asm.RFP, -8, asm.DWord),
			asm.Return(),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
			asm.Return(),
		}, nil},
		{"half of it read", asm.Instructions{
			asm.StoreMem(asm.RFP, -8, asm.R7, asm.DWord), // 0
			asm.LoadMem(asm.R0, asm.RFP, -4, asm.Word),
			asm.Return(),
		}, nil},
		{"through a copy of the stack pointer", asm.Instructions{
			asm.Mov.Reg(asm.R6, asm.RFP),
			asm.Add.Imm(asm.R6, -24),
			asm.StoreMem(asm.R6, 8, asm.R7, asm.DWord),  // 2: fp-16, read below
			asm.StoreMem(asm.R6, 16, asm.R7, asm.DWord), // 3: fp-8, dead
			asm.LoadMem(asm.R0, asm.RFP, -16, asm.DWord),
			asm.Return(),
		}, []int{3}},
		{"the stack pointer stored to memory", asm.Instructions{
			asm.StoreMem(asm.RFP, -16, asm.R7, asm.DWord),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.StoreMem(asm.RFP, -8, asm.R2, asm.DWord),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		}, nil},
		{"a stack pointer whose offset differs by path", asm.Instructions{
			asm.StoreMem(asm.RFP, -16, asm.R7, asm.DWord),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -16),
			asm.JEq.Imm(asm.R1, 0, "join"),
			asm.Add.Imm(asm.R2, 8),
			asm.LoadMem(asm.R0, asm.R2, 0, asm.DWord).WithSymbol("join"),
			asm.Return(),
		}, nil},
		{"a stack pointer in other arithmetic", asm.Instructions{
			asm.StoreMem(asm.RFP, -8, asm.R7, asm.DWord),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.And.Imm(asm.R2, -16),
			asm.LoadMem(asm.R0, asm.R2, 0, asm.DWord),
			asm.Return(),
		}, nil},
		{"a kept helper reads up to the stack's top", asm.Instructions{
			asm.StoreMem(asm.RFP, -8, asm.R7, asm.DWord),  // 0: above the pointer, read
			asm.StoreMem(asm.RFP, -24, asm.R7, asm.DWord), // 1: below it, dead
			asm.LoadMapPtr(asm.R1, 0).WithReference("m"),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -16),
			asm.Mov.Reg(asm.R3, asm.RFP),
			asm.Add.Imm(asm.R3, -16),
			asm.Mov.Imm(asm.R4, 0),
			asm.FnMapUpdateElem.Call(),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		}, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := droppedStores(t, tc.insns); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("stores left out at %v, want %v", got, tc.want)
			}
		})
	}
	if abi.BtTracePrintk != int64(asm.FnTracePrintk) {
		t.Fatalf("bpf_trace_printk is helper %d here, %d in cilium/ebpf", abi.BtTracePrintk, asm.FnTracePrintk)
	}
}
