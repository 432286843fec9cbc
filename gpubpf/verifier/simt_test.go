package verifier

import (
	"errors"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/gpubpf/abi"
)

var simtMaps = map[string]*ebpf.MapSpec{
	"arr":  {Name: "arr", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 4},
	"ro":   {Name: "ro", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 4},
	"hash": {Name: "hash", Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: 16},
}

// uniformLookup: r9 = ctx, r6 = &m[0] (lanes agree on it), the null check
// jumps to "out".
func uniformLookup(m string, dst asm.Register) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R9, asm.R1),
		stImm(asm.R10, -8, 0, asm.DWord),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -8),
		mapPtr(asm.R1, m),
		call(abi.HelperMapLookupElem),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.Mov.Reg(dst, asm.R0),
	}
}

// guardedAdd: r6 = &arr[0], then guard (which jumps to "out" in the lanes
// that must not add), then arr[0] += 1 atomically, and out: return 0.
func guardedAdd(guard ...asm.Instruction) asm.Instructions {
	return prog(uniformLookup("arr", asm.R6), is(append(guard, asm.Mov.Imm(asm.R1, 1), atomicAdd(asm.R6))...), ret("out"))
}

func atomicAdd(dst asm.Register) asm.Instruction {
	return asm.AddAtomic.Mem(dst, asm.R1, asm.DWord, 0)
}

// What the SIMT rules accept and reject, one behaviour per case.
func TestSIMT(t *testing.T) {
	tests := []struct {
		name  string
		insns asm.Instructions
		want  string // "" = accept
	}{
		{"uniform plain store of a ctx field", prog(uniformLookup("arr", asm.R6), is(
			asm.LoadMem(asm.R7, asm.R9, 8, asm.Word),
			asm.StoreMem(asm.R6, 0, asm.R7, asm.DWord)), ret("out")), ""},
		{"store of lane_id", prog(uniformLookup("arr", asm.R6), is(
			call(abi.HelperLaneID),
			asm.StoreMem(asm.R6, 0, asm.R0, asm.DWord)), ret("out")), "with divergent operands"},
		{"lane_id through a stack spill", prog(uniformLookup("arr", asm.R6), is(
			call(abi.HelperLaneID),
			asm.StoreMem(asm.R10, -16, asm.R0, asm.DWord),
			asm.LoadMem(asm.R7, asm.R10, -16, asm.DWord),
			asm.StoreMem(asm.R6, 0, asm.R7, asm.DWord)), ret("out")), "with divergent operands"},
		{"arithmetic on thread_idx", prog(uniformLookup("arr", asm.R6), is(
			asm.Mov.Imm(asm.R1, 1),
			call(abi.HelperThreadIdx),
			asm.RSh.Imm(asm.R0, 5),
			asm.StoreMem(asm.R6, 0, asm.R0, asm.DWord)), ret("out")), "with divergent operands"},
		{"globaltimer is divergent", prog(uniformLookup("arr", asm.R6), is(
			call(abi.HelperGlobaltimer),
			asm.StoreMem(asm.R6, 0, asm.R0, asm.DWord)), ret("out")), "with divergent operands"},
		{"sm id, warp id and block ids are uniform", prog(uniformLookup("arr", asm.R6), is(
			call(abi.HelperSmID),
			asm.Mov.Reg(asm.R7, asm.R0),
			call(abi.HelperWarpID),
			asm.Add.Reg(asm.R7, asm.R0),
			asm.Mov.Imm(asm.R1, 2),
			call(abi.HelperBlockIdx),
			asm.Add.Reg(asm.R7, asm.R0),
			asm.StoreMem(asm.R6, 0, asm.R7, asm.DWord)), ret("out")), ""},
		{"unguarded atomic", guardedAdd(), "atomic add on map \"arr\" by every lane"},
		{"atomic under lane_id()==0", guardedAdd(
			call(abi.HelperLaneID),
			asm.JNE.Imm(asm.R0, 0, "out")), ""},
		{"lane_id()==1 is no leader guard", guardedAdd(
			call(abi.HelperLaneID),
			asm.JNE.Imm(asm.R0, 1, "out")), "by every lane"},
		{"thread_linear_id zero-extended by shifts", guardedAdd(
			call(abi.HelperThreadLinearID),
			asm.LSh.Imm(asm.R0, 32),
			asm.RSh.Imm(asm.R0, 32),
			asm.JNE.Imm(asm.R0, 0, "out")), ""},
		{"lane_id() > 0 exits: the rest is a leader", guardedAdd(
			call(abi.HelperLaneID),
			asm.JGT.Imm(asm.R0, 0, "out")), ""},
		{"lane_id() > 1 exits: two lanes remain", guardedAdd(
			call(abi.HelperLaneID),
			asm.JGT.Imm(asm.R0, 1, "out")), "by every lane"},
		{"0 == thread_linear_id() with a register", guardedAdd(
			call(abi.HelperThreadLinearID),
			asm.Mov.Imm(asm.R1, 0),
			asm.JNE.Reg(asm.R1, asm.R0, "out")), ""},
		{"lane_id changed before the test is no guard", guardedAdd(
			call(abi.HelperLaneID),
			asm.RSh.Imm(asm.R0, 1),
			asm.JNE.Imm(asm.R0, 0, "out")), "by every lane"},
		{"thread_idx x, y and z all zero", guardedAdd(
			asm.Mov.Imm(asm.R1, 0), call(abi.HelperThreadIdx), asm.JNE.Imm(asm.R0, 0, "out"),
			asm.Mov.Imm(asm.R1, 1), call(abi.HelperThreadIdx), asm.JNE.Imm(asm.R0, 0, "out"),
			asm.Mov.Imm(asm.R1, 2), call(abi.HelperThreadIdx), asm.JNE.Imm(asm.R0, 0, "out")), ""},
		{"thread_idx x and y zero, z unchecked", guardedAdd(
			asm.Mov.Imm(asm.R1, 0), call(abi.HelperThreadIdx), asm.JNE.Imm(asm.R0, 0, "out"),
			asm.Mov.Imm(asm.R1, 1), call(abi.HelperThreadIdx), asm.JNE.Imm(asm.R0, 0, "out")), "by every lane"},
		{"side effect after the leader block ends", prog(uniformLookup("arr", asm.R6), is(
			call(abi.HelperLaneID),
			asm.JNE.Imm(asm.R0, 0, "join"),
			asm.Mov.Imm(asm.R1, 1),
			atomicAdd(asm.R6),
			asm.Mov.Imm(asm.R1, 1).WithSymbol("join"),
			atomicAdd(asm.R6)), ret("out")), "by every lane"},
		{"uniform store after the leader block ends", prog(uniformLookup("arr", asm.R6), is(
			asm.LoadMem(asm.R7, asm.R9, 12, asm.Word),
			call(abi.HelperLaneID),
			asm.JNE.Imm(asm.R0, 0, "join"),
			asm.Mov.Imm(asm.R1, 1),
			atomicAdd(asm.R6),
			asm.StoreMem(asm.R6, 0, asm.R7, asm.DWord).WithSymbol("join")), ret("out")), ""},
		{"value set by the leader alone, used by all", prog(uniformLookup("arr", asm.R6), is(
			asm.Mov.Imm(asm.R7, 0),
			call(abi.HelperLaneID),
			asm.JNE.Imm(asm.R0, 0, "join"),
			asm.Mov.Imm(asm.R7, 1),
			asm.StoreMem(asm.R6, 0, asm.R7, asm.DWord).WithSymbol("join")), ret("out")), "with divergent operands"},
		{"divergent branch around a store", prog(uniformLookup("arr", asm.R6), is(
			asm.Mov.Imm(asm.R1, 0),
			call(abi.HelperThreadIdx),
			asm.JNE.Imm(asm.R0, 5, "out"),
			stImm(asm.R6, 0, 1, asm.DWord)), ret("out")), "under divergent control (branch at insn"},
		{"lanes reconverge after a divergent loop", prog(uniformLookup("arr", asm.R6), is(
			call(abi.HelperLaneID),
			asm.Mov.Imm(asm.R7, 0),
			asm.Add.Imm(asm.R7, 1).WithSymbol("top"),
			asm.JLT.Reg(asm.R7, asm.R0, "top"),
			stImm(asm.R6, 0, 1, asm.DWord)), ret("out")), ""},
		{"load from a written map is divergent", prog(uniformLookup("arr", asm.R6), is(
			asm.LoadMem(asm.R7, asm.R6, 0, asm.DWord),
			asm.Add.Imm(asm.R7, 1),
			asm.StoreMem(asm.R6, 0, asm.R7, asm.DWord)), ret("out")), "with divergent operands"},
		{"load from a read-only map is uniform", prog(uniformLookup("ro", asm.R7), uniformLookup("arr", asm.R6)[1:], is(
			asm.LoadMem(asm.R7, asm.R7, 0, asm.DWord),
			asm.StoreMem(asm.R6, 0, asm.R7, asm.DWord)), ret("out")), ""},
		{"uniform hash update", prog(is(
			asm.Mov.Reg(asm.R9, asm.R1),
			asm.LoadMem(asm.R7, asm.R9, 0, asm.DWord),
			asm.StoreMem(asm.R10, -8, asm.R7, asm.DWord),
			asm.StoreMem(asm.R10, -16, asm.R7, asm.DWord),
			asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, -8),
			asm.Mov.Reg(asm.R3, asm.R10), asm.Add.Imm(asm.R3, -16),
			mapPtr(asm.R1, "hash"), asm.Mov.Imm(asm.R4, 0),
			call(abi.HelperMapUpdateElem)), ret("out")), ""},
		{"stack key stays uniform across a leader block with an atomic", prog(uniformLookup("arr", asm.R6), is(
			asm.LoadMem(asm.R7, asm.R9, 0, asm.DWord),
			asm.StoreMem(asm.R10, -16, asm.R7, asm.DWord),
			call(abi.HelperLaneID),
			asm.JNE.Imm(asm.R0, 0, "join"),
			asm.Mov.Imm(asm.R1, 1),
			atomicAdd(asm.R6),
			asm.Mov.Reg(asm.R2, asm.R10).WithSymbol("join"), asm.Add.Imm(asm.R2, -8),
			asm.Mov.Reg(asm.R3, asm.R10), asm.Add.Imm(asm.R3, -16),
			mapPtr(asm.R1, "hash"), asm.Mov.Imm(asm.R4, 0),
			call(abi.HelperMapUpdateElem)), ret("out")), ""},
		{"stack key written through a pointer copy by the leader alone", prog(uniformLookup("arr", asm.R6), is(
			asm.LoadMem(asm.R7, asm.R9, 0, asm.DWord),
			asm.StoreMem(asm.R10, -16, asm.R7, asm.DWord),
			call(abi.HelperLaneID),
			asm.JNE.Imm(asm.R0, 0, "join"),
			asm.Mov.Reg(asm.R8, asm.R10), asm.Add.Imm(asm.R8, -8),
			stImm(asm.R8, 0, 1, asm.DWord),
			asm.Mov.Reg(asm.R2, asm.R10).WithSymbol("join"), asm.Add.Imm(asm.R2, -8),
			asm.Mov.Reg(asm.R3, asm.R10), asm.Add.Imm(asm.R3, -16),
			mapPtr(asm.R1, "hash"), asm.Mov.Imm(asm.R4, 0),
			call(abi.HelperMapUpdateElem)), ret("out")), "map_update_elem on map \"hash\" with divergent operands"},
		{"hash update with a per-thread key", prog(is(
			asm.Mov.Imm(asm.R1, 0),
			call(abi.HelperThreadIdx),
			asm.StoreMem(asm.R10, -8, asm.R0, asm.DWord),
			stImm(asm.R10, -16, 1, asm.DWord),
			asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, -8),
			asm.Mov.Reg(asm.R3, asm.R10), asm.Add.Imm(asm.R3, -16),
			mapPtr(asm.R1, "hash"), asm.Mov.Imm(asm.R4, 0),
			call(abi.HelperMapUpdateElem)), ret("out")), "map_update_elem on map \"hash\" with divergent operands"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(&ebpf.ProgramSpec{Name: "t", Instructions: tc.insns}, simtMaps, abi.KernelEntry)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if !errors.Is(err, ErrDivergent) {
				t.Errorf("%v is not ErrDivergent", err)
			}
		})
	}
}

// A map one program writes makes loads from it divergent in every program
// of the collection: another warp may change it between two lanes' loads.
func TestCollectionWrittenMaps(t *testing.T) {
	writer := prog(uniformLookup("ro", asm.R6), is(
		call(abi.HelperLaneID),
		asm.JNE.Imm(asm.R0, 0, "out"),
		asm.Mov.Imm(asm.R1, 1),
		atomicAdd(asm.R6)), ret("out"))
	reader := prog(uniformLookup("ro", asm.R7), uniformLookup("arr", asm.R6)[1:], is(
		asm.LoadMem(asm.R7, asm.R7, 0, asm.DWord),
		asm.StoreMem(asm.R6, 0, asm.R7, asm.DWord)), ret("out"))
	if _, err := Verify(&ebpf.ProgramSpec{Name: "reader", Instructions: reader}, simtMaps, abi.KernelExit); err != nil {
		t.Fatalf("reader alone: %v", err)
	}
	spec := &ebpf.CollectionSpec{
		Maps: simtMaps,
		Programs: map[string]*ebpf.ProgramSpec{
			"writer": {Name: "writer", SectionName: abi.SecKernelEntry, Instructions: writer},
			"reader": {Name: "reader", SectionName: abi.SecKernelExit, Instructions: reader},
			"other":  {Name: "other", SectionName: "uprobe/foo", Instructions: is(asm.Return())},
		},
	}
	_, err := VerifyCollection(spec)
	var ve *Error
	if !errors.As(err, &ve) || ve.Prog != "reader" || !errors.Is(err, ErrDivergent) {
		t.Fatalf("got %v, want the reader rejected for a divergent store", err)
	}
	delete(spec.Programs, "reader")
	rep, err := VerifyCollection(spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Programs) != 1 || rep.Programs[0].Prog != "writer" || strings.Join(rep.Written, ",") != "ro" {
		t.Fatalf("report %+v, want only the writer, writing ro", rep)
	}
}
