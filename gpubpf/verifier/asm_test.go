package verifier

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/gpubpf/abi"
)

// Programs built with cilium/ebpf's asm: shapes clang does not emit, and
// exact SIMT cases.

var testMaps = map[string]*ebpf.MapSpec{
	"arr":     {Name: "arr", Type: ebpf.Array, KeySize: 4, ValueSize: 64, MaxEntries: 4},
	"hash":    {Name: "hash", Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: 16},
	"ring":    {Name: "ring", Type: ebpf.RingBuf, MaxEntries: 4096},
	"lru":     {Name: "lru", Type: ebpf.LRUHash, KeySize: 8, ValueSize: 8, MaxEntries: 16},
	"big":     {Name: "big", Type: ebpf.Array, KeySize: 4, ValueSize: 1 << 20, MaxEntries: 4096},
	".bss":    {Name: ".bss", Type: ebpf.Array, KeySize: 4, ValueSize: 16, MaxEntries: 1},
	".rodata": {Name: ".rodata", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1, Flags: rdonlyProg},
}

// stImm is a store of an immediate (asm.StoreImm refuses DWord, which BPF
// allows: the imm is sign-extended).
func stImm(dst asm.Register, off int16, v int64, size asm.Size) asm.Instruction {
	return asm.Instruction{OpCode: asm.StoreImmOp(size), Dst: dst, Offset: off, Constant: v}
}

func call(id int32) asm.Instruction { return asm.BuiltinFunc(id).Call() }

func mapPtr(r asm.Register, name string) asm.Instruction {
	return asm.LoadMapPtr(r, 0).WithReference(name)
}

func ja(off int16) asm.Instruction {
	return asm.Instruction{OpCode: asm.Ja.Op(asm.ImmSource), Offset: off}
}

// lookup0 leaves arr[0] (or NULL) in r0; the caller null-checks it.
func lookup0(m string) asm.Instructions {
	return asm.Instructions{
		stImm(asm.R10, -8, 0, asm.DWord),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -8),
		mapPtr(asm.R1, m),
		call(abi.HelperMapLookupElem),
	}
}

// leaderLookup: lanes other than 0 return; lane 0 has arr[0] in r6.
func leaderLookup() asm.Instructions {
	p := asm.Instructions{
		asm.Mov.Reg(asm.R9, asm.R1),
		call(abi.HelperLaneID),
		asm.JNE.Imm(asm.R0, 0, "out"),
	}
	p = append(p, lookup0("arr")...)
	return append(p, asm.JEq.Imm(asm.R0, 0, "out"), asm.Mov.Reg(asm.R6, asm.R0))
}

func ret(label string) asm.Instructions {
	return asm.Instructions{asm.Mov.Imm(asm.R0, 0).WithSymbol(label), asm.Return()}
}

func prog(parts ...asm.Instructions) asm.Instructions {
	var p asm.Instructions
	for _, x := range parts {
		p = append(p, x...)
	}
	return p
}

// manyBranches is n blocks "if (ctx->tenant_id <= i) r(3 + i%6) = i":
// the paths hold about (n/6)^6 different register files, unless paths that
// differ only in registers never read again (r3-r8) are pruned.
func manyBranches(n int) asm.Instructions {
	p := is(asm.Mov.Reg(asm.R9, asm.R1))
	for i := 0; i < n; i++ {
		l := fmt.Sprintf("j%d", i)
		p = append(p,
			asm.LoadMem(asm.R2, asm.R9, 8, asm.Word),
			asm.JGT.Imm(asm.R2, int32(i), l),
			asm.Mov.Imm(asm.R3+asm.Register(i%6), int32(i)),
			asm.Mov.Imm(asm.R4, 0).WithSymbol(l))
	}
	return append(p, asm.Mov.Imm(asm.R0, 0), asm.Return())
}

func is(x ...asm.Instruction) asm.Instructions { return x }

func TestAsm(t *testing.T) {
	tests := []struct {
		name   string
		insns  asm.Instructions
		want   string // "" = accept
		kind   error
		insn   int // with want: the insn the error names; -1 = any
		attach abi.Attach
	}{
		{"jump out of range", is(asm.Mov.Imm(asm.R0, 0), ja(5), asm.Return()), "jump out of range", ErrProgram, 1, 0},
		{"jump backwards out of range", is(asm.Mov.Imm(asm.R0, 0), ja(-3), asm.Return()), "jump out of range", ErrProgram, 1, 0},
		{"jump into ld_imm64", is(asm.Mov.Imm(asm.R0, 0), ja(1), asm.LoadImm(asm.R1, 1<<40, asm.DWord), asm.Return()), "middle of ld_imm64", ErrProgram, 1, 0},
		{"fall off the end", is(asm.Mov.Imm(asm.R0, 0), asm.Mov.Imm(asm.R1, 0)), "falls off the end", ErrProgram, 1, 0},
		{"no exit", is(asm.Mov.Imm(asm.R0, 0), ja(-2)), "no exit", ErrProgram, -1, 0},
		{"unreachable insn", is(asm.Mov.Imm(asm.R0, 0), asm.Return(), asm.Mov.Imm(asm.R0, 1), asm.Return()), "unreachable insn", ErrProgram, 2, 0},
		{"infinite loop without exit path", is(asm.Mov.Imm(asm.R0, 0), asm.JEq.Imm(asm.R0, 0, "x"), asm.Return(), ja(-1).WithSymbol("x")), "no path from this insn to exit", ErrUnboundedLoop, 3, 0},
		{"uninitialised register", is(asm.Mov.Reg(asm.R0, asm.R3), asm.Return()), "r3 is read before it is written", ErrMemory, 0, 0},
		{"r0 unset at exit", is(asm.Return()), "r0 is not set at exit", ErrMemory, 0, 0},
		{"pointer returned", is(asm.Mov.Reg(asm.R0, asm.R10), asm.Return()), "returning a pointer leaks it", ErrMemory, 1, 0},
		{"write r10", is(asm.Mov.Imm(asm.R10, 0), asm.Mov.Imm(asm.R0, 0), asm.Return()), "read-only", ErrProgram, 0, 0},
		{"loop repeating a state", prog(is(
			asm.LoadMem(asm.R2, asm.R1, 0, asm.DWord),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("top"),
			asm.JNE.Imm(asm.R2, 0, "top"),
			asm.Return())), "the loop can repeat a state", ErrUnboundedLoop, 2, 0},
		{"counted loop", prog(is(
			asm.Mov.Imm(asm.R0, 0),
			asm.Mov.Imm(asm.R1, 0),
			asm.Add.Reg(asm.R0, asm.R1).WithSymbol("top"),
			asm.Add.Imm(asm.R1, 1),
			asm.JLT.Imm(asm.R1, 100, "top"),
			asm.Return())), "", nil, 0, 0},
		// each turn's state is covered by the one before (r2 in [0, 255],
		// then [0, 254], ...) but never repeats it: the loop ends
		{"countdown from a masked ctx field", prog(is(
			asm.LoadMem(asm.R2, asm.R1, 8, asm.Word),
			asm.And.Imm(asm.R2, 0xff),
			asm.JEq.Imm(asm.R2, 0, "done").WithSymbol("top"),
			asm.Sub.Imm(asm.R2, 1),
			ja(-3),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("done"),
			asm.Return())), "", nil, 0, 0},
		{"loop bounded by a 32-bit ctx field", prog(is(
			asm.LoadMem(asm.R2, asm.R1, 8, asm.Word),
			asm.Mov.Imm(asm.R0, 0),
			asm.Add.Imm(asm.R0, 1).WithSymbol("top"),
			asm.JLT.Reg(asm.R0, asm.R2, "top"),
			asm.Return())), "unbounded loop: back-edge to insn 2", ErrUnboundedLoop, 3, 0},

		{"twenty-four sequential branches prune", manyBranches(24), "", nil, 0, 0},

		// Stack.
		{"stack below 512", is(stImm(asm.R10, -520, 1, asm.DWord), asm.Mov.Imm(asm.R0, 0), asm.Return()), "outside [-512, 0)", ErrStack, 0, 0},
		{"stack above fp", is(stImm(asm.R10, 0, 1, asm.Word), asm.Mov.Imm(asm.R0, 0), asm.Return()), "outside [-512, 0)", ErrStack, 0, 0},
		{"misaligned stack", is(stImm(asm.R10, -6, 1, asm.Word), asm.Mov.Imm(asm.R0, 0), asm.Return()), "misaligned", ErrStack, 0, 0},
		{"uninitialised stack read", is(stImm(asm.R10, -8, 1, asm.Word), asm.LoadMem(asm.R0, asm.R10, -8, asm.DWord), asm.Return()), "uninitialised stack at fp-8", ErrStack, 1, 0},
		{"partial stack read ok", is(stImm(asm.R10, -8, 1, asm.Word), asm.LoadMem(asm.R0, asm.R10, -8, asm.Word), asm.Return()), "", nil, 0, 0},
		{"spilled map value pointer keeps its type", prog(leaderLookup(), is(
			asm.StoreMem(asm.R10, -16, asm.R6, asm.DWord),
			asm.Mov.Imm(asm.R6, 0),
			asm.LoadMem(asm.R7, asm.R10, -16, asm.DWord),
			stImm(asm.R7, 8, 1, asm.DWord)), ret("out")), "", nil, 0, 0},
		{"partial read of spilled pointer", prog(is(
			asm.StoreMem(asm.R10, -8, asm.R1, asm.DWord),
			asm.LoadMem(asm.R0, asm.R10, -8, asm.Word),
			asm.Return())), "partial read of a spilled ctx pointer", ErrMemory, 1, 0},
		{"overwritten spilled pointer is unreadable", prog(is(
			asm.StoreMem(asm.R10, -8, asm.R1, asm.DWord),
			stImm(asm.R10, -8, 0, asm.Word),
			asm.LoadMem(asm.R0, asm.R10, -8, asm.DWord),
			asm.Return())), "uninitialised stack", ErrStack, 2, 0},
		{"variable stack offset", prog(is(
			asm.LoadMem(asm.R2, asm.R1, 8, asm.Word),
			asm.And.Imm(asm.R2, 7),
			asm.Mov.Reg(asm.R3, asm.R10),
			asm.Add.Reg(asm.R3, asm.R2),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return())), "variable offset added to a stack pointer", ErrMemory, 3, 0},

		// ctx.
		{"ctx field reads", prog(is(
			asm.LoadMem(asm.R2, asm.R1, 0, asm.DWord),
			asm.LoadMem(asm.R2, asm.R1, 8, asm.Word),
			asm.LoadMem(asm.R2, asm.R1, 12, asm.Word),
			asm.LoadMem(asm.R2, asm.R1, 16, asm.DWord),
			asm.LoadMem(asm.R2, asm.R1, 0, asm.Word),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return())), "", nil, 0, 0},
		{"ctx read across fields", is(asm.LoadMem(asm.R2, asm.R1, 8, asm.DWord), asm.Mov.Imm(asm.R0, 0), asm.Return()), "not a field of struct gpuext_probe_ctx", ErrMemory, 0, 0},
		{"ctx read past the end", is(asm.LoadMem(asm.R2, asm.R1, 24, asm.DWord), asm.Mov.Imm(asm.R0, 0), asm.Return()), "not a field", ErrMemory, 0, 0},
		{"ctx passed as key", prog(is(asm.Mov.Reg(asm.R2, asm.R1), mapPtr(asm.R1, "arr"), call(1), asm.Mov.Imm(asm.R0, 0), asm.Return())), "must point to the stack or a map value, is a ctx pointer", ErrHelper, 3, 0},

		// Maps and pointers.
		{"map pointer dereference", prog(is(mapPtr(asm.R2, "arr"), asm.LoadMem(asm.R0, asm.R2, 0, asm.DWord), asm.Return())), "only a helper argument", ErrMemory, 2, 0},
		{"map pointer arithmetic", prog(is(mapPtr(asm.R2, "arr"), asm.Add.Imm(asm.R2, 8), asm.Mov.Imm(asm.R0, 0), asm.Return())), "arithmetic on map pointer", ErrMemory, 2, 0},
		{"pointer comparison", prog(is(asm.Mov.Reg(asm.R2, asm.R10), asm.Mov.Imm(asm.R0, 0), asm.JGT.Reg(asm.R2, asm.R1, "out"), asm.Mov.Imm(asm.R0, 1)), ret("out")), "pointer comparison", ErrMemory, 2, 0},
		{"arithmetic before null check", prog(lookup0("arr"), is(asm.Add.Imm(asm.R0, 8), asm.Mov.Imm(asm.R0, 0), asm.Return())), "before its null check", ErrMemory, 6, 0},
		{"unknown map", prog(is(mapPtr(asm.R1, "nope"), asm.Mov.Imm(asm.R0, 0), asm.Return())), "unknown map \"nope\"", ErrMap, 0, 0},
		{"lru map", prog(is(mapPtr(asm.R1, "lru"), asm.Mov.Imm(asm.R0, 0), asm.Return())), "map \"lru\" has type LRUHash", ErrMap, 0, 0},
		{"map too big for the device", prog(is(mapPtr(asm.R1, "big"), asm.Mov.Imm(asm.R0, 0), asm.Return())), "more than 1 GiB", ErrMap, 0, 0},
		{"global variable counted by the leader", prog(is(
			call(abi.HelperLaneID), asm.JNE.Imm(asm.R0, 0, "out"),
			asm.LoadMapValue(asm.R2, 0, 8).WithReference(".bss"),
			asm.Mov.Imm(asm.R1, 1),
			asm.AddAtomic.Mem(asm.R2, asm.R1, asm.DWord, 0)), ret("out")), "", nil, 0, 0},
		{"global past its value", prog(is(
			asm.LoadMapValue(asm.R2, 0, 8).WithReference(".bss"),
			asm.LoadMem(asm.R0, asm.R2, 8, asm.DWord),
			asm.Return())), "out of bounds: bytes [16, 24)", ErrMemory, 2, 0},
		{"direct value of a multi-entry array", is(asm.LoadMapValue(asm.R1, 0, 0).WithReference("arr"), asm.Mov.Imm(asm.R0, 0), asm.Return()), "only single-entry arrays", ErrMap, 0, 0},
		{"write to a const global", prog(is(
			call(abi.HelperLaneID), asm.JNE.Imm(asm.R0, 0, "out"),
			asm.LoadMapValue(asm.R2, 0, 0).WithReference(".rodata"),
			stImm(asm.R2, 0, 1, asm.DWord)), ret("out")), "write to read-only map \".rodata\"", ErrMemory, 4, 0},
		{"bounded variable offset into map value", prog(leaderLookup(), is(
			asm.LoadMem(asm.R2, asm.R9, 8, asm.Word),
			asm.And.Imm(asm.R2, 7),
			asm.LSh.Imm(asm.R2, 3),
			asm.Add.Reg(asm.R6, asm.R2),
			stImm(asm.R6, 0, 1, asm.DWord)), ret("out")), "", nil, 0, 0},
		{"misaligned variable offset into map value", prog(leaderLookup(), is(
			asm.LoadMem(asm.R2, asm.R9, 8, asm.Word),
			asm.And.Imm(asm.R2, 7),
			asm.Add.Reg(asm.R6, asm.R2),
			stImm(asm.R6, 0, 1, asm.DWord)), ret("out")), "misaligned 8-byte access", ErrMemory, 14, 0},
		{"unbounded variable offset into map value", prog(leaderLookup(), is(
			asm.LoadMem(asm.R2, asm.R9, 8, asm.Word),
			asm.Add.Reg(asm.R6, asm.R2),
			stImm(asm.R6, 0, 1, asm.Byte)), ret("out")), "unbounded offset", ErrMemory, 13, 0},
		{"negative offset into map value", prog(leaderLookup(), is(stImm(asm.R6, -8, 1, asm.DWord)), ret("out")), "out of bounds", ErrMemory, 11, 0},
		{"spilled pointer passed as map data", prog(is(
			asm.StoreMem(asm.R10, -8, asm.R10, asm.DWord),
			asm.StoreMem(asm.R10, -16, asm.R1, asm.DWord),
			asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, -8),
			asm.Mov.Reg(asm.R3, asm.R10), asm.Add.Imm(asm.R3, -16),
			mapPtr(asm.R1, "hash"), asm.Mov.Imm(asm.R4, 0),
			call(abi.HelperMapUpdateElem)), ret("out")), "pointer leak: map_update_elem key (r2) holds a spilled stack pointer", ErrMemory, 9, 0},
		{"stack pointer leaked into map", prog(leaderLookup(), is(asm.StoreMem(asm.R6, 0, asm.R10, asm.DWord)), ret("out")), "pointer leak", ErrMemory, 11, 0},

		// Helpers.
		{"tail call", is(asm.Mov.Imm(asm.R3, 0), mapPtr(asm.R2, "arr"), call(12), asm.Mov.Imm(asm.R0, 0), asm.Return()), "helper bpf_tail_call (12) is not allowed at kernel_exit", ErrHelper, 3, abi.KernelExit},
		{"probe_read", is(call(4), asm.Mov.Imm(asm.R0, 0), asm.Return()), "helper bpf_probe_read (4) needs a host round trip", ErrHelper, 0, 0},
		{"get_current_pid_tgid", is(call(14), asm.Mov.Imm(asm.R0, 0), asm.Return()), "bpf_get_current_pid_tgid (14) needs a host round trip", ErrHelper, 0, 0},
		{"perf_event_output", is(call(25), asm.Mov.Imm(asm.R0, 0), asm.Return()), "needs a host round trip; not allowed at kernel_entry", ErrHelper, 0, 0},
		{"bpf-to-bpf call", is(asm.Call.Label("f"), asm.Return(), asm.Mov.Imm(asm.R0, 0).WithSymbol("f"), asm.Return()), "call to BPF function", ErrProgram, 0, 0},
		{"thread_idx dim not constant", is(asm.LoadMem(asm.R1, asm.R1, 8, asm.Word), call(abi.HelperThreadIdx), asm.Mov.Imm(asm.R0, 0), asm.Return()), "dim must be a constant 0, 1 or 2", ErrHelper, 1, 0},
		{"thread_idx dim 3", is(asm.Mov.Imm(asm.R1, 3), call(abi.HelperThreadIdx), asm.Mov.Imm(asm.R0, 0), asm.Return()), "dim must be a constant", ErrHelper, 1, 0},
		{"helper clobbers r1-r5", is(asm.Mov.Imm(asm.R3, 1), call(abi.HelperSmID), asm.Mov.Reg(asm.R0, asm.R3), asm.Return()), "r3 is read before it is written", ErrMemory, 2, 0},
		{"lookup in a ring buffer", prog(lookup0("ring"), ret("out")), "a ring buffer is only for ringbuf_output", ErrHelper, 5, 0},
		{"delete from an array", prog(is(stImm(asm.R10, -8, 0, asm.DWord), asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, -8), mapPtr(asm.R1, "arr"), call(3)), ret("out")), "only hash entries can be deleted", ErrHelper, 5, 0},
		{"short key", prog(is(stImm(asm.R10, -8, 0, asm.Word), asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, -8), mapPtr(asm.R1, "hash"), call(1)), ret("out")), "uninitialised stack at fp-4", ErrStack, 5, 0},
		{"key is a scalar", prog(is(asm.Mov.Imm(asm.R2, 0), mapPtr(asm.R1, "arr"), call(1)), ret("out")), "must point to the stack or a map value, is a scalar", ErrHelper, 3, 0},
		{"ringbuf size unbounded", prog(is(
			asm.Mov.Reg(asm.R9, asm.R1),
			call(abi.HelperLaneID), asm.JNE.Imm(asm.R0, 0, "out"),
			stImm(asm.R10, -8, 0, asm.DWord),
			asm.LoadMem(asm.R3, asm.R9, 8, asm.Word),
			asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, -8), mapPtr(asm.R1, "ring"), asm.Mov.Imm(asm.R4, 0), call(abi.HelperRingbufOutput)), ret("out")),
			"size must be in", ErrHelper, 10, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &ebpf.ProgramSpec{Name: "t", Instructions: tc.insns}
			res, err := Verify(p, testMaps, tc.attach)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				if res.Insns == 0 {
					t.Fatalf("empty result %+v", res)
				}
				return
			}
			var ve *Error
			if !errors.As(err, &ve) {
				t.Fatalf("got %v, want *Error %q", err, tc.want)
			}
			if !strings.Contains(ve.Msg, tc.want) {
				t.Errorf("got %q, want %q", err, tc.want)
			}
			if !errors.Is(err, tc.kind) {
				t.Errorf("error %v is not %v", err, tc.kind)
			}
			if tc.insn >= 0 && ve.Insn != tc.insn {
				t.Errorf("error at insn %d, want %d: %v", ve.Insn, tc.insn, err)
			}
		})
	}
}
