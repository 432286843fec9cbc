package verifier

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/gpubpf/abi"
)

// A concrete interpreter for the programs of TestAcceptedIndexingIsSafe:
// scalars, a pointer into the one array value, the stack and the ctx.

type cval struct {
	ptr bool // a pointer to the map value (the only pointer these programs compute with)
	v   uint64
}

type concrete struct {
	ctx   [abi.CtxSize]byte
	value [64]byte
	stack [stackSize]byte
}

// run executes insns; it returns an error for an access outside the value
// or the stack, or a misaligned one: what the verifier must have excluded.
func (c *concrete) run(insns asm.Instructions) error {
	var r [11]cval
	r[10] = cval{v: stackSize}
	g, cerr := buildCFG(insns) // resolves the asm labels
	if cerr != nil {
		return fmt.Errorf("cfg: %s", cerr.msg)
	}
	ctxPtr := cval{v: 1 << 40}
	r[1] = ctxPtr
	for pc, steps := 0, 0; steps < 10000; steps++ {
		ins := *g.ins[pc]
		next := pc + width(&ins)
		cls := ins.OpCode.Class()
		switch {
		case ins.OpCode.IsDWordLoad():
			r[ins.Dst] = cval{ptr: ins.Reference() == "arr"}
		case cls.IsALU():
			is64 := cls == asm.ALU64Class
			src := cval{v: uint64(ins.Constant)}
			if !is64 {
				src.v = uint64(uint32(ins.Constant))
			}
			if ins.OpCode.Source() == asm.RegSource {
				src = r[ins.Src]
			}
			op := ins.OpCode.ALUOp()
			d := r[ins.Dst]
			if op == asm.Mov {
				d = src
				if !is64 {
					d.v = uint64(uint32(d.v))
				}
			} else {
				d.v = refALU(op, d.v, src.v, is64)
				d.ptr = is64 && (d.ptr || src.ptr)
			}
			r[ins.Dst] = d
		case cls == asm.LdXClass, cls.IsStore():
			base := r[ins.Src]
			if cls.IsStore() {
				base = r[ins.Dst]
			}
			size := uint64(ins.OpCode.Size().Sizeof())
			off := base.v + uint64(int64(ins.Offset))
			var mem []byte
			switch {
			case base.ptr:
				mem = c.value[:]
			case base.v >= ctxPtr.v:
				mem, off = c.ctx[:], off-ctxPtr.v
			default:
				mem = c.stack[:]
			}
			if off > uint64(len(mem))-size || off%size != 0 {
				return fmt.Errorf("insn %d: %d-byte access at %d of a %d-byte region", pc, size, int64(off), len(mem))
			}
			if cls == asm.LdXClass {
				var b [8]byte
				copy(b[:], mem[off:off+size])
				r[ins.Dst] = cval{v: binary.LittleEndian.Uint64(b[:])}
			} else {
				v := uint64(ins.Constant)
				if cls == asm.StXClass {
					v = r[ins.Src].v
				}
				var b [8]byte
				binary.LittleEndian.PutUint64(b[:], v)
				copy(mem[off:off+size], b[:size])
			}
		case cls.IsJump():
			op := ins.OpCode.JumpOp()
			switch op {
			case asm.Exit:
				return nil
			case asm.Call:
				r[0] = cval{} // lane 0
				if ins.Constant == abi.HelperMapLookupElem {
					r[0] = cval{ptr: true} // key 0 of a 4-entry array
				}
				next = pc + 1
			case asm.Ja:
				next = pc + 1 + int(ins.Offset)
			default:
				a := r[ins.Dst].v
				b := uint64(ins.Constant)
				if ins.OpCode.Source() == asm.RegSource {
					b = r[ins.Src].v
				}
				if r[ins.Dst].ptr {
					a = 1 // a non-null pointer against 0
				}
				var taken bool
				if cls == asm.Jump32Class {
					taken = cmp32(op, uint32(a), uint32(b))
				} else {
					taken = holds(op, a, b)
				}
				if taken {
					next = pc + 1 + int(ins.Offset)
				}
			}
		}
		pc = next
	}
	return fmt.Errorf("did not exit")
}

// randIndexing builds: look up arr[0]; compute an index from
// ctx->tenant_id with random ALU ops and random early exits; access the
// value at that index.
func randIndexing(r *rand.Rand) asm.Instructions {
	p := append(uniformLookup("arr", asm.R6),
		asm.LoadMem(asm.R7, asm.R9, 8, asm.Word),
		asm.LoadMem(asm.R8, asm.R9, 0, asm.DWord),
	)
	aluOps := []asm.ALUOp{asm.Add, asm.Sub, asm.Mul, asm.Div, asm.Mod, asm.Or, asm.And, asm.Xor, asm.LSh, asm.RSh, asm.ArSh}
	jumpOps := []asm.JumpOp{asm.JEq, asm.JNE, asm.JGT, asm.JGE, asm.JLT, asm.JLE, asm.JSGT, asm.JSGE, asm.JSLT, asm.JSLE, asm.JSet}
	for i, n := 0, 1+r.IntN(6); i < n; i++ {
		switch r.IntN(4) {
		case 0, 1:
			op := aluOps[r.IntN(len(aluOps))]
			imm := int32(r.IntN(80)) - 8
			if op == asm.LSh || op == asm.RSh || op == asm.ArSh {
				imm = int32(r.IntN(8))
			}
			if r.IntN(2) == 0 {
				p = append(p, op.Imm(asm.R7, imm))
			} else {
				p = append(p, op.Imm32(asm.R7, imm))
			}
		case 2:
			op := jumpOps[r.IntN(len(jumpOps))]
			imm := int32(r.IntN(80)) - 8
			if r.IntN(2) == 0 {
				p = append(p, op.Imm(asm.R7, imm, "out"))
			} else {
				p = append(p, op.Imm32(asm.R7, imm, "out"))
			}
		case 3:
			// Combine with the other ctx value, so bounds come from both.
			p = append(p, aluOps[r.IntN(3)].Reg(asm.R7, asm.R8))
			if r.IntN(2) == 0 {
				p = append(p, asm.JGT.Reg(asm.R8, asm.R7, "out"))
			}
		}
	}
	size := []asm.Size{asm.Byte, asm.Half, asm.Word, asm.DWord}[r.IntN(4)]
	p = append(p,
		asm.Add.Reg(asm.R6, asm.R7),
		stImm(asm.R6, int16(r.IntN(16)-4), 1, size),
		asm.LoadMem(asm.R0, asm.R6, 0, asm.Byte),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
		asm.Return())
	return p
}

// Programs that index a map value through a computed offset: whenever the
// verifier accepts one, no concrete ctx makes it access outside the value
// or misaligned. This checks the range analysis, branch narrowing and
// pointer arithmetic together, end to end.
func TestAcceptedIndexingIsSafe(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	maps := map[string]*ebpf.MapSpec{"arr": {Name: "arr", Type: ebpf.Array, KeySize: 4, ValueSize: 64, MaxEntries: 4}}
	edges := []uint64{0, 1, 2, 7, 8, 31, 32, 63, 64, 65, 127, 128, 255, 1 << 16, math.MaxInt32, 1 << 31, math.MaxUint32}
	accepted := 0
	for i := 0; i < 4000; i++ {
		insns := randIndexing(r)
		// The programs are leader-guarded in spirit; the SIMT rules are
		// not under test here, so run them under a lane_id()==0 guard.
		insns = append(asm.Instructions{
			asm.Mov.Reg(asm.R9, asm.R1),
			call(abi.HelperLaneID),
			asm.Mov.Reg(asm.R1, asm.R9),
			asm.JNE.Imm(asm.R0, 0, "out"),
		}, insns...)
		if _, err := Verify(&ebpf.ProgramSpec{Name: "idx", Instructions: insns}, maps, abi.KernelEntry); err != nil {
			continue
		}
		accepted++
		for j := 0; j < 60; j++ {
			var c concrete
			tenant := edges[r.IntN(len(edges))] + uint64(r.IntN(3)) - 1
			if j%3 == 0 {
				tenant = r.Uint64()
			}
			kid := edges[r.IntN(len(edges))]
			if j%4 == 0 {
				kid = r.Uint64()
			}
			binary.LittleEndian.PutUint32(c.ctx[8:], uint32(tenant))
			binary.LittleEndian.PutUint64(c.ctx[0:], kid)
			if err := c.run(insns); err != nil {
				t.Fatalf("accepted, but with tenant_id %d, kernel_id %d: %v\n%v", uint32(tenant), kid, err, insns)
			}
		}
	}
	if accepted < 200 {
		t.Fatalf("only %d of 4000 programs accepted: the generator no longer exercises the analysis", accepted)
	}
	t.Logf("%d accepted programs ran safely", accepted)
}
