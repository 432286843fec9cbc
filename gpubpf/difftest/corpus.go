package difftest

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// Context layout of a corpus program.
const (
	CtxSize   = 144
	CtxResult = 0  // u64: the full r0 at exit
	CtxInput  = 8  // input words the program reads (and may overwrite)
	CtxRegs   = 72 // r1..r8 at exit, 8 bytes each
	ProgName  = "prog"
	// stack: [r10-64, r10) scratch, zeroed by the prologue; keys/values below.
	stackScratch = 64
	keyOff       = -96 // map key (up to 16 bytes)
	valOff       = -128
)

// Case is one corpus program with its input.
type Case struct {
	Name string
	Spec *ebpf.CollectionSpec // one program, ProgName, and its maps
	Ctx  []byte               // CtxSize bytes
}

// Corpus is the deterministic corpus: n programs (n <= 0: DefaultN).
func Corpus(n int) []Case {
	if n <= 0 {
		n = DefaultN
	}
	var out []Case
	for i := 0; i < n; i++ {
		out = append(out, generate(i))
	}
	return out
}

// DefaultN is the corpus size the tests and the GPU corpus use.
const DefaultN = 360

var edge = []uint64{
	0, 1, 2, 3, 7, 31, 32, 33, 63, 64, 65, 0xff, 0x80, 0x7f, 0xffff, 0x8000,
	0x7fffffff, 0x80000000, 0xffffffff, 0x100000000, 0x1_0000_0001,
	0x7fffffffffffffff, 0x8000000000000000, 0xffffffffffffffff, 0xfffffffffffffffe,
	0xffffffff80000000, 0x0123456789abcdef, 0xfedcba9876543210, 5, 10, 1000, 0xdeadbeef,
}

type gen struct {
	r      *rand.Rand
	insns  asm.Instructions
	pos    int // raw offset of the next instruction
	labels map[int]int
	fix    []fixup
	nlabel int
	maps   map[string]*ebpf.MapSpec
	// counter is the loop counter register while a loop body is emitted,
	// else noReg.
	counter asm.Register
	depth   int
	// regs are the scalar registers the code being emitted may use; inSub
	// while a subprogram is emitted (no ctx, no loop counter there).
	regs  []asm.Register
	inSub bool
	subs  []subprog
}

type fixup struct{ idx, pos, label int }

func (g *gen) emit(ins ...asm.Instruction) {
	for _, in := range ins {
		g.insns = append(g.insns, in)
		g.pos += int(in.Width())
	}
}

func (g *gen) newLabel() int { g.nlabel++; return g.nlabel }

func (g *gen) mark(l int) { g.labels[l] = g.pos }

// jump emits a jump to label l (resolved in finish).
func (g *gen) jump(in asm.Instruction, l int) {
	g.fix = append(g.fix, fixup{len(g.insns), g.pos, l})
	in.Offset = 0
	g.emit(in)
}

func (g *gen) finish() asm.Instructions {
	for _, f := range g.fix {
		g.insns[f.idx].Offset = int16(g.labels[f.label] - f.pos - 1)
	}
	return g.insns
}

func (g *gen) value() uint64 {
	if g.r.IntN(3) == 0 {
		return g.r.Uint64()
	}
	return edge[g.r.IntN(len(edge))]
}

func (g *gen) imm32() int32 {
	switch g.r.IntN(4) {
	case 0:
		return int32(g.r.Uint32())
	case 1:
		return int32(g.r.IntN(64))
	default:
		return int32(edge[g.r.IntN(len(edge))])
	}
}

// valueRegs are the scalar registers a program computes in.
const noReg = asm.Register(0xff)

var valueRegs = []asm.Register{asm.R0, asm.R1, asm.R2, asm.R3, asm.R4, asm.R5, asm.R6, asm.R7, asm.R8}

func (g *gen) src() asm.Register { return g.regs[g.r.IntN(len(g.regs))] }

func (g *gen) dst() asm.Register {
	for {
		r := g.src()
		if r != g.counter {
			return r
		}
	}
}

var aluOps = []asm.ALUOp{asm.Add, asm.Sub, asm.Mul, asm.Div, asm.SDiv, asm.Or, asm.And, asm.LSh, asm.RSh,
	asm.Neg, asm.Mod, asm.SMod, asm.Xor, asm.Mov, asm.ArSh}

func aluIns(op asm.ALUOp, dst, src asm.Register, k int32, reg, is32 bool) asm.Instruction {
	var in asm.Instruction
	switch {
	case reg && is32:
		in = op.Reg32(dst, src)
	case reg:
		in = op.Reg(dst, src)
	case is32:
		in = op.Imm32(dst, k)
	default:
		in = op.Imm(dst, k)
	}
	return in
}

func (g *gen) alu(is32 bool) {
	op := aluOps[g.r.IntN(len(aluOps))]
	dst := g.dst()
	reg := g.r.IntN(2) == 0
	k := g.imm32()
	if !reg && (op == asm.Div || op == asm.SDiv || op == asm.Mod || op == asm.SMod) && k == 0 {
		k = -1 // the verifier rejects division by an immediate zero
	}
	if op == asm.Neg {
		reg = false
		k = 0
	}
	if !reg && (op == asm.LSh || op == asm.RSh || op == asm.ArSh) {
		if is32 {
			k &= 31 // the verifier rejects immediate shifts out of range
		} else {
			k &= 63
		}
	}
	g.emit(aluIns(op, dst, g.src(), k, reg, is32))
}

func (g *gen) special() {
	dst := g.dst()
	switch g.r.IntN(5) {
	case 0:
		sx := []asm.ALUOp{asm.MovSX8, asm.MovSX16, asm.MovSX32}
		g.emit(sx[g.r.IntN(3)].Reg(dst, g.src()))
	case 1:
		sx := []asm.ALUOp{asm.MovSX8, asm.MovSX16}
		g.emit(sx[g.r.IntN(2)].Reg32(dst, g.src()))
	case 2:
		g.emit(asm.BSwap(dst, []asm.Size{asm.Half, asm.Word, asm.DWord}[g.r.IntN(3)]))
	case 3:
		g.emit(asm.HostTo([]asm.Endianness{asm.LE, asm.BE}[g.r.IntN(2)], dst, []asm.Size{asm.Half, asm.Word, asm.DWord}[g.r.IntN(3)]))
	case 4:
		g.emit(asm.LoadImm(dst, int64(g.value()), asm.DWord))
	}
}

var sizes = []asm.Size{asm.Byte, asm.Half, asm.Word, asm.DWord}

func (g *gen) stack() {
	sz := sizes[g.r.IntN(4)]
	n := int16(sz.Sizeof())
	off := -int16(g.r.IntN(stackScratch/int(n))+1) * n
	switch g.r.IntN(4) {
	case 0:
		g.emit(asm.StoreMem(asm.RFP, off, g.src(), sz))
	case 1:
		g.emit(stImm(asm.RFP, off, int64(g.imm32()), sz))
	case 2:
		g.emit(asm.LoadMem(g.dst(), asm.RFP, off, sz))
	case 3:
		if sz == asm.DWord {
			sz = asm.Word
			off = -4 * int16(g.r.IntN(16)+1)
		}
		g.emit(asm.LoadMemSX(g.dst(), asm.RFP, off, sz))
	}
}

func (g *gen) ctx() {
	sz := sizes[g.r.IntN(4)]
	n := sz.Sizeof()
	off := int16(CtxInput + g.r.IntN((CtxRegs-CtxInput)/n)*n)
	switch g.r.IntN(3) {
	case 0:
		g.emit(asm.LoadMem(g.dst(), asm.R9, off, sz))
	case 1:
		g.emit(asm.StoreMem(asm.R9, off, g.src(), sz))
	case 2:
		g.emit(stImm(asm.R9, off, int64(g.imm32()), sz))
	}
}

var jumpOps = []asm.JumpOp{asm.JEq, asm.JGT, asm.JGE, asm.JSet, asm.JNE, asm.JSGT, asm.JSGE, asm.JLT, asm.JLE, asm.JSLT, asm.JSLE}

func (g *gen) condJump(l int) {
	op := jumpOps[g.r.IntN(len(jumpOps))]
	a := g.src()
	var in asm.Instruction
	switch g.r.IntN(4) {
	case 0:
		in = op.Reg(a, g.src(), "")
	case 1:
		in = op.Reg32(a, g.src(), "")
	case 2:
		in = op.Imm(a, g.imm32(), "")
	case 3:
		in = op.Imm32(a, g.imm32(), "")
	}
	g.jump(in, l)
}

// branch: if cond goto L; body; [goto E; L: else-body; E:]
func (g *gen) branch(budget int) {
	l := g.newLabel()
	g.condJump(l)
	g.block(budget / 2)
	if g.r.IntN(2) == 0 {
		e := g.newLabel()
		g.jump(asm.Ja.Label(""), e)
		g.mark(l)
		g.block(budget / 2)
		g.mark(e)
	} else {
		g.mark(l)
	}
	// A label must sit on an instruction: the epilogue or the next op.
}

func (g *gen) loop(budget int) {
	if g.counter != noReg || g.depth > 0 {
		g.alu(false)
		return
	}
	g.counter = asm.R8
	g.emit(asm.Mov.Imm(asm.R8, int32(g.r.IntN(6)+1)))
	top := g.newLabel()
	g.mark(top)
	g.depth++
	g.block(budget)
	g.depth--
	g.emit(asm.Sub.Imm(asm.R8, 1))
	g.jump(asm.JNE.Imm(asm.R8, 0, ""), top)
	g.counter = noReg
}

func (g *gen) op(budget int) {
	switch k := g.r.IntN(20); {
	case k < 6:
		g.alu(false)
	case k < 10:
		g.alu(true)
	case k < 12:
		g.special()
	case k < 14:
		g.stack()
	case k < 15 && !g.inSub:
		g.ctx()
	case k < 18 && budget > 3 && g.depth < 3:
		g.depth++
		g.branch(budget - 1)
		g.depth--
	case k < 19 && budget > 3 && !g.inSub:
		g.loop(budget / 2)
	default:
		g.alu(g.r.IntN(2) == 0)
	}
}

func (g *gen) block(n int) {
	for i := 0; i < n; i++ {
		g.op(n - i)
	}
}

// reinit gives r0-r5 scalar values again after a helper call.
func (g *gen) reinit(keepR0 bool) {
	for _, r := range []asm.Register{asm.R1, asm.R2, asm.R3, asm.R4, asm.R5} {
		if r == g.counter {
			continue
		}
		if g.r.IntN(2) == 0 {
			g.emit(asm.Mov.Imm(r, g.imm32()))
		} else {
			g.emit(asm.Mov.Reg(r, []asm.Register{asm.R6, asm.R7}[g.r.IntN(2)]))
		}
	}
	if !keepR0 {
		g.emit(asm.Mov.Reg(asm.R0, asm.R6))
	}
}

func (g *gen) prologue() {
	g.emit(asm.Mov.Reg(asm.R9, asm.R1))
	for off := int16(-8); off >= -stackScratch; off -= 8 {
		g.emit(stImm(asm.RFP, off, 0, asm.DWord))
	}
	for i, r := range valueRegs {
		switch g.r.IntN(3) {
		case 0:
			g.emit(asm.LoadMem(r, asm.R9, int16(CtxInput+8*(i%8)), asm.DWord))
		case 1:
			g.emit(asm.LoadMem(r, asm.R9, int16(CtxInput+4*(i%16)), asm.Word))
		default:
			g.emit(asm.LoadImm(r, int64(g.value()), asm.DWord))
		}
	}
}

func (g *gen) epilogue() {
	for i, r := range valueRegs[1:] {
		g.emit(asm.StoreMem(asm.R9, int16(CtxRegs+8*i), r, asm.DWord))
	}
	g.emit(asm.StoreMem(asm.R9, CtxResult, asm.R0, asm.DWord))
	g.emit(asm.Return())
}

func generate(i int) Case {
	g := &gen{r: rand.New(rand.NewPCG(uint64(i), 0x9e3779b97f4a7c15)), labels: map[int]int{}, maps: map[string]*ebpf.MapSpec{}, counter: noReg, regs: valueRegs}
	var kind string
	g.prologue()
	switch i % 10 {
	case 0, 1, 2:
		kind = "alu"
		g.block(10 + g.r.IntN(30))
	case 3:
		if i%20 == 13 {
			kind = "call"
			g.callProgram()
			break
		}
		kind = "flow"
		for j := 0; j < 4; j++ {
			g.branch(6)
			g.loop(4)
		}
	case 4, 5:
		kind = "array"
		g.mapProgram(ebpf.Array, false)
	case 6:
		kind = "hash"
		g.mapProgram(ebpf.Hash, false)
	case 7:
		kind = "atomic"
		g.mapProgram([]ebpf.MapType{ebpf.Array, ebpf.Hash, ebpf.PerCPUArray}[g.r.IntN(3)], true)
	case 8:
		kind = "percpu"
		g.mapProgram(ebpf.PerCPUArray, g.r.IntN(2) == 0)
	case 9:
		kind = "ringbuf"
		g.ringbufProgram()
	}
	g.epilogue()
	g.subprograms()
	ctx := make([]byte, CtxSize)
	for off := CtxInput; off < CtxRegs; off += 8 {
		binary.LittleEndian.PutUint64(ctx[off:], g.value())
	}
	name := fmt.Sprintf("c%03d_%s", i, kind)
	return Case{
		Name: name,
		Spec: &ebpf.CollectionSpec{
			Maps: g.maps,
			Programs: map[string]*ebpf.ProgramSpec{ProgName: {
				Name:         ProgName,
				Type:         ebpf.Syscall,
				Flags:        unix.BPF_F_SLEEPABLE,
				License:      "GPL",
				Instructions: g.finish(),
			}},
		},
		Ctx: ctx,
	}
}

// stImm is *(size *)(dst+off) = imm, the DWord form included (sign-extended
// imm; asm.StoreImm refuses it).
func stImm(dst asm.Register, off int16, v int64, size asm.Size) asm.Instruction {
	return asm.Instruction{OpCode: asm.StoreImmOp(size), Dst: dst, Offset: off, Constant: v}
}

type subprog struct {
	name string
	ptr  bool // r1 points into the caller's stack
}

// callProgram: bpf-to-bpf calls from the main program, with scalar
// arguments or a pointer into the caller's stack.
func (g *gen) callProgram() {
	for j := 0; j < 1+g.r.IntN(3); j++ {
		sp := subprog{name: fmt.Sprintf("sub%d", len(g.subs)), ptr: g.r.IntN(2) == 0}
		g.subs = append(g.subs, sp)
		if sp.ptr {
			g.emit(asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, -32))
		}
		g.emit(asm.Call.Label(sp.name))
		g.emit(asm.Xor.Reg(asm.R6, asm.R0))
		g.reinit(true)
		g.block(2 + g.r.IntN(4))
	}
}

// subprograms emits the bodies of the functions callProgram called.
func (g *gen) subprograms() {
	for _, sp := range g.subs {
		g.inSub = true
		g.regs = []asm.Register{asm.R0, asm.R2, asm.R3, asm.R4, asm.R5}
		if !sp.ptr {
			g.regs = append(g.regs, asm.R1)
		}
		g.emit(stImm(asm.RFP, -8, 0, asm.DWord).WithSymbol(sp.name))
		for off := int16(-16); off >= -stackScratch; off -= 8 {
			g.emit(stImm(asm.RFP, off, 0, asm.DWord))
		}
		g.emit(asm.Mov.Reg(asm.R0, asm.R2))
		g.block(4 + g.r.IntN(12))
		if sp.ptr {
			g.emit(asm.LoadMem(asm.R3, asm.R1, 8, asm.DWord))
			g.emit(asm.StoreMem(asm.R1, 0, asm.R0, asm.DWord))
			g.emit(asm.Add.Reg(asm.R0, asm.R3))
		}
		g.emit(asm.Return())
		g.inSub = false
		g.regs = valueRegs
	}
}
