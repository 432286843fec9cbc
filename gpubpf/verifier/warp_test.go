package verifier

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/gpubpf/abi"
)

// A warp simulation for TestAcceptedSideEffectsAreWarpSafe: the 32 lanes
// of a warp run one after the other over shared map memory (one legal
// interleaving, and the most adversarial for loads of written maps), and
// every side effect is recorded per instruction and lane.

type warpConfig struct {
	blockDim [3]uint64
	warpBase uint64 // linear thread id of lane 0
	sm       uint64
}

type effect struct{ off, val uint64 }

type warpRun struct {
	value   [64]byte           // arr[0]
	atomics map[int][]int      // pc -> lanes that ran it
	stores  map[int][][]effect // pc -> per lane, the stores it made there
	updates map[int][][]effect // pc -> per lane, the (key, value) it wrote
}

func (w *warpRun) lane(g *cfg, cfgw warpConfig, lane int, ctx []byte) error {
	type val struct {
		k   int // 0 scalar, 1 stack, 2 ctx, 3 arr value, 4 map
		v   uint64
		ref string
	}
	var r [11]val
	var stack [stackSize]byte
	r[1] = val{k: 2}
	r[10] = val{k: 1, v: stackSize}
	lin := cfgw.warpBase + uint64(lane)
	tid := [3]uint64{lin % cfgw.blockDim[0], lin / cfgw.blockDim[0] % cfgw.blockDim[1], lin / (cfgw.blockDim[0] * cfgw.blockDim[1])}
	mem := func(b val, off int16, size int) ([]byte, error) {
		var m []byte
		switch b.k {
		case 1:
			m = stack[:]
		case 2:
			m = ctx
		case 3:
			m = w.value[:]
		default:
			return nil, fmt.Errorf("access through kind %d", b.k)
		}
		o := int64(b.v) + int64(off)
		if o < 0 || o+int64(size) > int64(len(m)) {
			return nil, fmt.Errorf("access at %d", o)
		}
		return m[o : o+int64(size)], nil
	}
	get := func(m []byte) uint64 {
		var b [8]byte
		copy(b[:], m)
		return binary.LittleEndian.Uint64(b[:])
	}
	for pc, steps := 0, 0; steps < 5000; steps++ {
		ins := g.ins[pc]
		next := pc + width(ins)
		cls := ins.OpCode.Class()
		switch {
		case ins.OpCode.IsDWordLoad():
			r[ins.Dst] = val{k: 4, ref: ins.Reference()}
		case cls.IsALU():
			src := val{v: uint64(ins.Constant)}
			if ins.OpCode.Source() == asm.RegSource {
				src = r[ins.Src]
			}
			d := r[ins.Dst]
			if op := ins.OpCode.ALUOp(); op == asm.Mov {
				d = src
			} else {
				d.v = refALU(op, d.v, src.v, true)
			}
			r[ins.Dst] = d
		case cls == asm.LdXClass:
			m, err := mem(r[ins.Src], ins.Offset, ins.OpCode.Size().Sizeof())
			if err != nil {
				return err
			}
			r[ins.Dst] = val{v: get(m)}
		case cls.IsStore():
			size := ins.OpCode.Size().Sizeof()
			m, err := mem(r[ins.Dst], ins.Offset, size)
			if err != nil {
				return err
			}
			v := uint64(ins.Constant)
			if cls == asm.StXClass {
				v = r[ins.Src].v
			}
			if ins.OpCode.Mode() == asm.AtomicMode {
				w.atomics[pc] = append(w.atomics[pc], lane)
				v += get(m)
			} else if r[ins.Dst].k == 3 {
				w.stores[pc][lane] = append(w.stores[pc][lane], effect{r[ins.Dst].v + uint64(ins.Offset), v})
			}
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], v)
			copy(m, b[:size])
		case cls.IsJump():
			switch op := ins.OpCode.JumpOp(); op {
			case asm.Exit:
				return nil
			case asm.Call:
				res := uint64(0)
				switch ins.Constant {
				case abi.HelperMapLookupElem:
					r[0] = val{k: 3}
				case abi.HelperMapUpdateElem:
					k, err := mem(r[2], 0, 8)
					if err != nil {
						return err
					}
					v, err := mem(r[3], 0, 8)
					if err != nil {
						return err
					}
					w.updates[pc][lane] = append(w.updates[pc][lane], effect{get(k), get(v)})
				case abi.HelperThreadIdx:
					res = tid[r[1].v]
				case abi.HelperLaneID:
					res = uint64(lane)
				case abi.HelperThreadLinearID:
					res = lin
				case abi.HelperWarpID:
					res = lin / 32
				case abi.HelperSmID:
					res = cfgw.sm
				}
				if ins.Constant != abi.HelperMapLookupElem {
					r[0] = val{v: res}
				}
			case asm.Ja:
				next = jumpTarget(pc, ins)
			default:
				a, b := r[ins.Dst].v, uint64(ins.Constant)
				if ins.OpCode.Source() == asm.RegSource {
					b = r[ins.Src].v
				}
				if r[ins.Dst].k != 0 {
					a = 1 // a non-null pointer
				}
				if holds(op, a, b) {
					next = jumpTarget(pc, ins)
				}
			}
		}
		pc = next
	}
	return fmt.Errorf("lane %d did not exit", lane)
}

// randWarpProgram: values from divergent and uniform sources, guards
// (leader and not), and side effects, nested at random.
func randWarpProgram(r *rand.Rand) asm.Instructions {
	p := append(uniformLookup("arr", asm.R6),
		asm.Mov.Imm(asm.R7, 0),
		asm.Mov.Imm(asm.R8, 0),
	)
	labels := 0
	var block func(depth int)
	block = func(depth int) {
		for i, n := 0, 1+r.IntN(4); i < n; i++ {
			switch c := r.IntN(10); {
			case c < 3: // a source
				switch r.IntN(8) {
				case 0:
					p = append(p, call(abi.HelperLaneID))
				case 1:
					p = append(p, asm.Mov.Imm(asm.R1, int32(r.IntN(3))), call(abi.HelperThreadIdx))
				case 2:
					p = append(p, call(abi.HelperThreadLinearID))
				case 3:
					p = append(p, call(abi.HelperSmID))
				case 4:
					p = append(p, call(abi.HelperWarpID))
				case 5:
					p = append(p, asm.LoadMem(asm.R0, asm.R9, 8, asm.Word))
				case 6:
					p = append(p, asm.LoadMem(asm.R0, asm.R6, 8*int16(r.IntN(4)), asm.DWord))
				case 7:
					p = append(p, asm.Mov.Imm(asm.R0, int32(r.IntN(4))))
				}
				p = append(p, asm.Mov.Reg(asm.R7+asm.Register(r.IntN(2)), asm.R0))
			case c < 4: // arithmetic
				p = append(p, []asm.ALUOp{asm.Add, asm.And, asm.Xor, asm.RSh}[r.IntN(4)].Reg(asm.R7, asm.R8))
			case c < 5: // through the stack
				p = append(p, asm.StoreMem(asm.R10, -16, asm.R7, asm.DWord), asm.LoadMem(asm.R8, asm.R10, -16, asm.DWord))
			case c < 6 && depth < 3 && r.IntN(3) == 0: // thread_idx chain: x == 0 && y == 0 [&& z == 0]
				labels++
				l := fmt.Sprintf("l%d", labels)
				for d := 0; d < 2+r.IntN(2); d++ {
					p = append(p, asm.Mov.Imm(asm.R1, int32(d)), call(abi.HelperThreadIdx), asm.Mov.Reg(asm.R7, asm.R0), asm.JNE.Imm(asm.R7, 0, l))
				}
				block(depth + 1)
				p = append(p, asm.Mov.Imm(asm.R0, 0).WithSymbol(l))
			case c < 7 && depth < 3: // a guarded block
				labels++
				l := fmt.Sprintf("l%d", labels)
				reg := asm.R7 + asm.Register(r.IntN(2))
				if r.IntN(2) == 0 {
					p = append(p, asm.JNE.Imm(reg, 0, l)) // if (x == 0) { ... }
				} else {
					p = append(p, asm.JGT.Imm(reg, int32(r.IntN(4)), l))
				}
				block(depth + 1)
				p = append(p, asm.Mov.Imm(asm.R0, 0).WithSymbol(l))
			default: // a side effect
				off := 8 * int16(r.IntN(4))
				switch r.IntN(3) {
				case 0:
					p = append(p, asm.Mov.Imm(asm.R1, 1), asm.AddAtomic.Mem(asm.R6, asm.R1, asm.DWord, off))
				case 1:
					p = append(p, asm.StoreMem(asm.R6, off, asm.R7+asm.Register(r.IntN(2)), asm.DWord))
				case 2:
					p = append(p,
						asm.StoreMem(asm.R10, -24, asm.R7, asm.DWord),
						asm.StoreMem(asm.R10, -32, asm.R8, asm.DWord),
						asm.Mov.Reg(asm.R2, asm.R10), asm.Add.Imm(asm.R2, -24),
						asm.Mov.Reg(asm.R3, asm.R10), asm.Add.Imm(asm.R3, -32),
						mapPtr(asm.R1, "hash"), asm.Mov.Imm(asm.R4, 0),
						call(abi.HelperMapUpdateElem))
				}
			}
		}
	}
	block(0)
	return append(p, asm.Mov.Imm(asm.R0, 0).WithSymbol("out"), asm.Return())
}

// Whenever the verifier accepts a program, running a warp never has two
// lanes apply the same atomic, and a plain store or map update made by more
// than one lane is made by all 32 with the same address and value. The
// warps cover thread 0 of a block and later warps, with 1-, 2- and 3-D
// blocks.
func TestAcceptedSideEffectsAreWarpSafe(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	maps := map[string]*ebpf.MapSpec{
		"arr":  {Name: "arr", Type: ebpf.Array, KeySize: 4, ValueSize: 32, MaxEntries: 1},
		"hash": {Name: "hash", Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: 64},
	}
	configs := []warpConfig{
		{[3]uint64{256, 1, 1}, 0, 3}, {[3]uint64{256, 1, 1}, 64, 3},
		{[3]uint64{8, 8, 1}, 0, 1}, {[3]uint64{8, 8, 1}, 32, 1},
		{[3]uint64{4, 2, 4}, 0, 0}, {[3]uint64{16, 1, 4}, 32, 7},
	}
	accepted, withEffects := 0, 0
	for i := 0; i < 3000; i++ {
		insns := randWarpProgram(r)
		if _, err := Verify(&ebpf.ProgramSpec{Name: "warp", Instructions: insns}, maps, abi.KernelEntry); err != nil {
			continue
		}
		accepted++
		g, _ := buildCFG(insns)
		ctx := make([]byte, abi.CtxSize)
		binary.LittleEndian.PutUint32(ctx[8:], uint32(r.IntN(3)))
		effects := false
		for _, wc := range configs {
			w := &warpRun{atomics: map[int][]int{}, stores: map[int][][]effect{}, updates: map[int][][]effect{}}
			for pc := range g.ins {
				w.stores[pc] = make([][]effect, 32)
				w.updates[pc] = make([][]effect, 32)
			}
			for lane := 0; lane < 32; lane++ {
				if err := w.lane(g, wc, lane, ctx); err != nil {
					t.Fatalf("accepted program failed in lane %d: %v\n%v", lane, err, insns)
				}
			}
			for pc, lanes := range w.atomics {
				effects = true
				if len(slices.Compact(lanes)) > 1 {
					t.Fatalf("accepted, but lanes %v all ran the atomic at insn %d (config %+v)\n%v", lanes, pc, wc, insns)
				}
			}
			for _, kind := range []map[int][][]effect{w.stores, w.updates} {
				for pc, perLane := range kind {
					ran := 0
					for _, e := range perLane {
						if len(e) > 0 {
							ran++
						}
					}
					if ran == 0 {
						continue
					}
					effects = true
					if ran == 1 {
						continue
					}
					for lane, e := range perLane {
						if !slices.Equal(e, perLane[0]) {
							t.Fatalf("accepted, but at insn %d lane %d wrote %v and lane 0 %v (config %+v)\n%v", pc, lane, e, perLane[0], wc, insns)
						}
					}
				}
			}
		}
		if effects {
			withEffects++
		}
	}
	if withEffects < 100 {
		t.Fatalf("only %d accepted programs (of %d) made side effects: the generator no longer exercises the rules", withEffects, accepted)
	}
	t.Logf("%d accepted programs, %d with side effects, all warp-safe", accepted, withEffects)
}
