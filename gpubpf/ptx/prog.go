package ptx

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/devmap"
	"github.com/gpuext/gpuext/gpubpf/verifier"
)

type progTranslator struct {
	spec  *ebpf.CollectionSpec
	name  string
	fn    string
	out   strings.Builder
	maps  []string
	insns int
	raw   []int // raw index of each instruction
	list  asm.Instructions

	// Inline form (inline.go): only the main function, as a block whose
	// exits branch to endLabel; lookups of statically known ARRAY and
	// PER_WARP maps become address arithmetic.
	inline   bool
	endLabel string
	stackSym string            // the .local stack array: r10-based accesses use it directly
	cur      int               // index of the instruction being translated
	lookups  map[int]inlineKey // lookup calls with a known map (by index)
	warp     bool              // emitted warpAdd: activemask needs PTX warpMinPTX
	slotReg  bool              // %__gxslot holds %smid*64 + %warpid (inline form)
	bslotReg bool              // %__gxbslot holds the block's linear index (inline form)
	// blockSlot: per-warp maps updated only atomically (atomicOnlyMaps),
	// whose inline lookups take the block's slot
	blockSlot map[string]bool
	thread0   bool // inline form under the thread-0 site guard: the linear thread id is 0
	// nonNull[r]: r holds an inline lookup's address that cannot be NULL,
	// that of element elem[r] (a constant key); copied by a mov, lost at
	// any other write and at a jump target
	nonNull [11]bool
	elem    [11]deferElem
	// zero[r]: r holds 0 (thread_linear_id under the thread-0 guard), as
	// nonNull copied and lost; branched: a jump (one not decided not
	// taken by zero or nonNull) or an exit came before the instruction in
	// program order, so it may not run on every path
	// zero or nonNull came before (in program order) the instruction
	zero     [11]bool
	branched bool
	// fused: raw indices of loads that begin a load, add, store to make
	// one atomic add (Options.FusedAdds); skip: raw indices already
	// emitted by such a fusion
	fused map[int]bool
	skip  map[int]bool
	// deadStore: raw indices of stores to the stack that nothing reads
	// (deadstore.go), not emitted
	deadStore map[int]bool
	// flow: which registers hold stack pointers and constants, at each
	// instruction (deadstore.go); nil when not followed
	flow *stackFlow
	bt   bool // a bpftime-style program (kprobe/KERNEL): its helper numbers translate
	// bslotName: the kernel-scope register with the block's linear index
	// (SharedSlotReg), set in every thread that runs this program; "" =
	// the program computes its own
	bslotName string
	// dfr: the entry's counts deferred to the exit (inline.go, deferSet);
	// dfrEntry: this is an entry program.
	dfr      *deferSet
	dfrEntry bool
}

func reg(r asm.Register) string { return "%r" + strconv.Itoa(int(r)) }

// Immediates: signed decimal for .s types, unsigned decimal of the value
// truncated to the width for .u and .b types (PTX integer literals are
// non-negative; a negative one is an expression), so no .u/.b
// instruction carries a negative literal.
func imm(v int64) string { return strconv.FormatInt(v, 10) }

func uimm(v int64, bits int) string {
	u := uint64(v)
	if bits < 64 {
		u &= 1<<bits - 1
	}
	if u > 1<<63-1 {
		return fmt.Sprintf("0x%016X", u) // beyond .s64: an unsigned literal
	}
	return strconv.FormatUint(u, 10)
}

func simm(v int64, bits int) string {
	if bits < 64 {
		s := 64 - uint(bits)
		v = v << s >> s
	}
	return strconv.FormatInt(v, 10)
}

func (t *progTranslator) emit(format string, args ...any) {
	t.out.WriteString("\t")
	fmt.Fprintf(&t.out, format, args...)
	t.out.WriteString(";\n")
}

func label(raw int) string { return "$L__pc" + strconv.Itoa(raw) }

func addr(r asm.Register, off int16) string {
	if off == 0 {
		return "[" + reg(r) + "]"
	}
	return "[" + reg(r) + "+" + strconv.Itoa(int(off)) + "]"
}

// maddr is the state space and operand of a load or store at r+off: in
// the inline form an access through r10 (always the stack) names the .local
// array, so ptxas sees a local access at a constant offset (and can keep the
// slot in a register); anything else is a generic access.
func (t *progTranslator) maddr(r asm.Register, off int16) (string, string) {
	if t.inline && t.stackSym != "" && r == asm.R10 && off < 0 && int(off) >= -StackSize {
		return ".local", fmt.Sprintf("[%s+%d]", t.stackSym, StackSize+int(off))
	}
	return "", addr(r, off)
}

var sizeBits = map[asm.Size]int{asm.Byte: 8, asm.Half: 16, asm.Word: 32, asm.DWord: 64}

func (t *progTranslator) translate(insns asm.Instructions) error {
	// Raw offsets: a dword load takes two slots.
	raw := make([]int, len(insns))
	symbols := map[string]int{}
	pos := 0
	for i, ins := range insns {
		raw[i] = pos
		if s := ins.Symbol(); s != "" {
			symbols[s] = pos
		}
		pos += int(ins.Width())
	}
	valid := map[int]bool{}
	for _, r := range raw {
		valid[r] = true
	}
	// Subprograms: every target of a bpf-to-bpf call starts a function
	// that runs to the next one; the main program starts at 0.
	starts := map[int]bool{0: true}
	jumpTarget := make([]int, len(insns))
	for i, ins := range insns {
		if !ins.IsFunctionCall() {
			continue
		}
		tgt := raw[i] + 1 + int(ins.Constant)
		if ref := ins.Reference(); ref != "" {
			p, ok := symbols[ref]
			if !ok {
				return fmt.Errorf("insn %d: call to unknown function %q", i, ref)
			}
			tgt = p
		}
		if !valid[tgt] || tgt == 0 {
			return fmt.Errorf("insn %d: call to %d, not a subprogram", i, tgt)
		}
		starts[tgt] = true
		jumpTarget[i] = tgt
	}
	funcOf := make([]int, len(insns)) // raw start of each instruction's function
	for i := range insns {
		if starts[raw[i]] {
			funcOf[i] = raw[i]
		} else if i > 0 {
			funcOf[i] = funcOf[i-1]
		}
	}
	startOf := map[int]int{}
	for i := range insns {
		startOf[raw[i]] = funcOf[i]
	}
	targets := map[int]bool{}
	for i, ins := range insns {
		op := ins.OpCode
		cls := op.Class()
		if !cls.IsJump() || op.JumpOp() == asm.Call || op.JumpOp() == asm.Exit {
			continue
		}
		var tgt int
		if ref := ins.Reference(); ref != "" {
			p, ok := symbols[ref]
			if !ok {
				return fmt.Errorf("insn %d: jump to unknown label %q", i, ref)
			}
			tgt = p
		} else if cls == asm.Jump32Class && op.JumpOp() == asm.Ja {
			tgt = raw[i] + 1 + int(ins.Constant)
		} else {
			tgt = raw[i] + 1 + int(ins.Offset)
		}
		if !valid[tgt] {
			return fmt.Errorf("insn %d: jump to %d, not an instruction", i, tgt)
		}
		if startOf[tgt] != funcOf[i] {
			return fmt.Errorf("insn %d: jump to %d, into another function", i, tgt)
		}
		targets[tgt] = true
		jumpTarget[i] = tgt
	}
	t.insns = len(insns)

	// Subprograms are declared first (a call needs the prototype), then
	// defined after the main program: .func (.param .b64 __ret)
	// <fn>__sub<raw>(.param .b64 __a1 .. __a5), r1-r5 the arguments, an
	// own 512-byte stack, r6-r9 callee-saved by construction (PTX
	// registers are per function).
	var subs []int
	for st := range starts {
		if st != 0 {
			subs = append(subs, st)
		}
	}
	sort.Ints(subs)
	if len(subs) == 0 {
		t.flow = stackPointers(insns, raw, jumpTarget)
		t.deadStore = deadStackStores(insns, raw, t.flow)
	}
	t.lookups = knownLookups(t.spec, insns, raw, targets, funcOf)
	t.raw, t.list = raw, insns
	if t.inline {
		for _, k := range t.lookups {
			if l, err := devmap.SpecLayout(t.spec.Maps[k.mapName]); err != nil || l.Type != abi.MapPerWarp {
				continue
			}
			if t.blockSlot[k.mapName] && t.bslotName != "" {
				continue // the entry block sets it for the kernel
			}
			if t.blockSlot[k.mapName] && !t.bslotReg {
				// a map updated only atomically: the block's linear index
				// picks its slot (atomiconly.go)
				t.out.WriteString("\t.reg .b32 %__gxbslot;\n")
				t.linear("%ctaid", "%nctaid")
				t.out.WriteString("\tmov.u32 %__gxbslot, %w0;\n")
				t.bslotReg = true
			} else if !t.blockSlot[k.mapName] && !t.slotReg {
				// The warp's slot, read once: %smid and %warpid are
				// special registers ptxas reads anew (S2R) at each use.
				t.out.WriteString("\t.reg .b32 %__gxslot;\n\tmov.u32 %__gxslot, %smid;\n\tmov.u32 %w2, %warpid;\n")
				t.out.WriteString("\tmad.lo.u32 %__gxslot, %__gxslot, 64, %w2;\n")
				t.slotReg = true
			}
		}
		for i, ins := range insns {
			if funcOf[i] != 0 {
				continue
			}
			if targets[raw[i]] {
				t.out.WriteString(label(raw[i]) + ":\n")
				t.nonNull = [11]bool{} // another path may arrive here
				t.zero = [11]bool{}
			}
			fmt.Fprintf(&t.out, "\t// %d: %v\n", raw[i], ins)
			t.cur = i
			if t.skip[raw[i]] {
				continue
			}
			t.clobber(ins) // (an inlined lookup sets r0's again)
			if err := t.insn(ins, jumpTarget[i]); err != nil {
				return fmt.Errorf("insn %d (%v): %w", raw[i], ins, err)
			}
		}
		return nil
	}
	for _, st := range subs {
		fmt.Fprintf(&t.out, ".func (.param .b64 __ret) %s(%s);\n", t.subName(st), subParams)
	}
	if len(subs) > 0 {
		t.out.WriteString("\n")
	}
	for _, st := range append([]int{0}, subs...) {
		if st == 0 {
			fmt.Fprintf(&t.out, ".func (.param .b64 __ret) %s(.param .b64 __ctx)\n{\n", t.fn)
		} else {
			fmt.Fprintf(&t.out, ".func (.param .b64 __ret) %s(%s)\n{\n", t.subName(st), subParams)
		}
		fmt.Fprintf(&t.out, "\t.local .align 8 .b8 __stack[%d];\n", StackSize)
		t.out.WriteString("\t.reg .b64 %r<11>;\n\t.reg .b64 %t<3>;\n\t.reg .b32 %w<8>;\n\t.reg .pred %p<4>;\n")
		if st == 0 {
			t.emit("ld.param.u64 %%r1, [__ctx]")
		} else {
			for a := 1; a <= 5; a++ {
				t.emit("ld.param.u64 %%r%d, [__a%d]", a, a)
			}
		}
		t.emit("mov.u64 %%r10, __stack")
		t.emit("cvta.local.u64 %%r10, %%r10")
		t.emit("add.u64 %%r10, %%r10, %d", StackSize)
		for i, ins := range insns {
			if funcOf[i] != st {
				continue
			}
			if targets[raw[i]] {
				t.out.WriteString(label(raw[i]) + ":\n")
			}
			fmt.Fprintf(&t.out, "\t// %d: %v\n", raw[i], ins)
			t.cur = i
			if t.skip[raw[i]] {
				continue
			}
			if err := t.insn(ins, jumpTarget[i]); err != nil {
				return fmt.Errorf("insn %d (%v): %w", raw[i], ins, err)
			}
		}
		t.out.WriteString("}\n\n")
	}
	return nil
}

const subParams = ".param .b64 __a1, .param .b64 __a2, .param .b64 __a3, .param .b64 __a4, .param .b64 __a5"

func (t *progTranslator) subName(raw int) string { return t.fn + "__sub" + strconv.Itoa(raw) }

func (t *progTranslator) insn(ins asm.Instruction, tgt int) error {
	op := ins.OpCode
	if t.deadStore[t.raw[t.cur]] { // only plain stores to the stack are in it
		t.out.WriteString("\t// a stack store nothing reads: not emitted\n")
		return nil
	}
	switch cls := op.Class(); cls {
	case asm.ALU64Class:
		return t.alu64(ins)
	case asm.ALUClass:
		return t.alu32(ins)
	case asm.JumpClass, asm.Jump32Class:
		return t.jump(ins, tgt)
	case asm.LdClass:
		return t.ldImm(ins)
	case asm.LdXClass:
		bits := sizeBits[op.Size()]
		if t.fused[t.raw[t.cur]] {
			return t.fusedAdd(ins)
		}
		switch op.Mode() {
		case asm.MemMode:
			ss, a := t.maddr(ins.Src, ins.Offset)
			t.emit("ld%s.u%d %s, %s", ss, bits, reg(ins.Dst), a)
		case asm.MemSXMode:
			if bits == 64 {
				return fmt.Errorf("64-bit sign-extending load: %w", ErrUnsupported)
			}
			ss, a := t.maddr(ins.Src, ins.Offset)
			t.emit("ld%s.s%d %s, %s", ss, bits, reg(ins.Dst), a)
		default:
			return fmt.Errorf("load mode %v: %w", op.Mode(), ErrUnsupported)
		}
	case asm.StClass:
		if op.Mode() != asm.MemMode {
			return fmt.Errorf("store mode %v: %w", op.Mode(), ErrUnsupported)
		}
		t.emit("mov.u64 %%t0, %s", uimm(ins.Constant, 64))
		ss, a := t.maddr(ins.Dst, ins.Offset)
		t.emit("st%s.u%d %s, %%t0", ss, sizeBits[op.Size()], a)
	case asm.StXClass:
		switch op.Mode() {
		case asm.MemMode:
			ss, a := t.maddr(ins.Dst, ins.Offset)
			t.emit("st%s.u%d %s, %s", ss, sizeBits[op.Size()], a, reg(ins.Src))
		case asm.AtomicMode:
			return t.atomic(ins)
		default:
			return fmt.Errorf("store mode %v: %w", op.Mode(), ErrUnsupported)
		}
	default:
		return fmt.Errorf("instruction class %v: %w", cls, ErrUnsupported)
	}
	return nil
}

func (t *progTranslator) ldImm(ins asm.Instruction) error {
	if !ins.OpCode.IsDWordLoad() {
		return fmt.Errorf("legacy packet load: %w", ErrUnsupported)
	}
	d := reg(ins.Dst)
	switch ins.Src {
	case asm.R0:
		t.emit("mov.u64 %s, %s", d, uimm(ins.Constant, 64))
		return nil
	case asm.PseudoMapFD, asm.PseudoMapValue:
	default:
		return fmt.Errorf("dword load kind %d: %w", ins.Src, ErrUnsupported)
	}
	name := ins.Reference()
	ms, ok := t.spec.Maps[name]
	if name == "" || !ok {
		return fmt.Errorf("map reference %q: not a map of the collection", name)
	}
	l, err := devmap.SpecLayout(ms)
	if err != nil {
		return err
	}
	found := false
	for _, m := range t.maps {
		found = found || m == name
	}
	if !found {
		t.maps = append(t.maps, name)
	}
	t.emit("mov.u64 %s, %s", d, MapSymbol(name))
	t.emit("cvta.global.u64 %s, %s", d, d)
	if ins.Src == asm.PseudoMapValue {
		off := uint64(uint32(uint64(ins.Constant) >> 32))
		if l.Type != abi.MapArray || l.MaxEntries != 1 {
			return fmt.Errorf("direct value access to map %q: only single-entry arrays: %w", name, ErrUnsupported)
		}
		if off >= uint64(l.ValueSize) {
			return fmt.Errorf("direct value access to map %q at %d: beyond the value", name, off)
		}
		t.emit("add.u64 %s, %s, %d", d, d, abi.MapHdrSize+8+off)
	}
	return nil
}

// src64 is the 64-bit source operand: a register, or the sign-extended imm.
func src64(ins asm.Instruction) (string, bool) {
	if ins.OpCode.Source() == asm.RegSource {
		return reg(ins.Src), false
	}
	return imm(ins.Constant), true
}

func (t *progTranslator) alu64(ins asm.Instruction) error {
	d := reg(ins.Dst)
	s, isImm := src64(ins)
	k := ins.Constant
	us := s // the source for .u/.b instructions
	if isImm {
		us = uimm(k, 64)
	}
	switch op := ins.OpCode.ALUOp(); op {
	case asm.Add:
		t.emit("add.s64 %s, %s, %s", d, d, s)
	case asm.Sub:
		t.emit("sub.s64 %s, %s, %s", d, d, s)
	case asm.Mul:
		t.emit("mul.lo.s64 %s, %s, %s", d, d, s)
	case asm.Or:
		t.emit("or.b64 %s, %s, %s", d, d, us)
	case asm.And:
		t.emit("and.b64 %s, %s, %s", d, d, us)
	case asm.Xor:
		t.emit("xor.b64 %s, %s, %s", d, d, us)
	case asm.Neg:
		t.emit("neg.s64 %s, %s", d, d)
	case asm.LSh, asm.RSh, asm.ArSh:
		ptxop := map[asm.ALUOp]string{asm.LSh: "shl.b64", asm.RSh: "shr.u64", asm.ArSh: "shr.s64"}[op]
		if isImm {
			t.emit("%s %s, %s, %d", ptxop, d, d, k&63)
		} else {
			t.emit("cvt.u32.u64 %%w0, %s", s)
			t.emit("and.b32 %%w0, %%w0, 63")
			t.emit("%s %s, %s, %%w0", ptxop, d, d)
		}
	case asm.Mov:
		t.emit("mov.u64 %s, %s", d, us)
	case asm.MovSX8, asm.MovSX16, asm.MovSX32:
		if isImm {
			return fmt.Errorf("movsx with an immediate")
		}
		bits := map[asm.ALUOp]int{asm.MovSX8: 8, asm.MovSX16: 16, asm.MovSX32: 32}[op]
		t.emit("cvt.s64.s%d %s, %s", bits, d, s)
	case asm.Div, asm.SDiv, asm.Mod, asm.SMod:
		t.divmod(op, 64, d, d, s, isImm, k)
	case asm.Swap:
		return t.bswap(ins.Dst, ins.Constant)
	default:
		return fmt.Errorf("alu64 op %v: %w", op, ErrUnsupported)
	}
	return nil
}

// divmod emits dst = a op b with eBPF's rules for zero and -1 divisors.
// bits is 64 (registers %r*) or 32 (%w*).
func (t *progTranslator) divmod(op asm.ALUOp, bits int, dst, a, b string, isImm bool, k int64) {
	u := fmt.Sprintf("u%d", bits)
	s := fmt.Sprintf("s%d", bits)
	movz := func() { t.emit("mov.%s %s, 0", u, dst) }
	if isImm {
		if bits == 32 {
			k = int64(int32(k))
		}
		switch {
		case k == 0 && (op == asm.Div || op == asm.SDiv):
			movz()
		case k == 0:
			// modulo by zero: dividend unchanged
		case k == -1 && op == asm.SDiv:
			t.emit("neg.%s %s, %s", s, dst, a)
		case k == -1 && op == asm.SMod:
			movz()
		case op == asm.Div:
			t.emit("div.%s %s, %s, %s", u, dst, a, uimm(k, bits))
		case op == asm.Mod:
			t.emit("rem.%s %s, %s, %s", u, dst, a, uimm(k, bits))
		case op == asm.SDiv:
			t.emit("div.%s %s, %s, %s", s, dst, a, simm(k, bits))
		case op == asm.SMod:
			t.emit("rem.%s %s, %s, %s", s, dst, a, simm(k, bits))
		}
		return
	}
	switch op {
	case asm.Div:
		t.emit("setp.eq.%s %%p0, %s, 0", u, b)
		t.emit("@%%p0 mov.%s %s, 0", u, dst)
		t.emit("@!%%p0 div.%s %s, %s, %s", u, dst, a, b)
	case asm.Mod:
		t.emit("setp.ne.%s %%p0, %s, 0", u, b)
		t.emit("@%%p0 rem.%s %s, %s, %s", u, dst, a, b)
	case asm.SDiv, asm.SMod:
		t.emit("setp.eq.%s %%p0, %s, 0", s, b)
		t.emit("setp.eq.%s %%p1, %s, -1", s, b)
		t.emit("or.pred %%p2, %%p0, %%p1")
		if op == asm.SDiv {
			t.emit("@%%p1 neg.%s %s, %s", s, dst, a)
			t.emit("@%%p0 mov.%s %s, 0", u, dst)
			t.emit("@!%%p2 div.%s %s, %s, %s", s, dst, a, b)
		} else {
			t.emit("@%%p1 mov.%s %s, 0", u, dst)
			t.emit("@!%%p2 rem.%s %s, %s, %s", s, dst, a, b)
		}
	}
}

// bswap reverses the low size bits of dst, zero-extended.
func (t *progTranslator) bswap(dst asm.Register, size int64) error {
	d := reg(dst)
	switch size {
	case 16:
		t.emit("cvt.u32.u64 %%w0, %s", d)
		t.emit("mov.u32 %%w1, 0")
		t.emit("prmt.b32 %%w0, %%w0, %%w1, 0x4401")
		t.emit("cvt.u64.u32 %s, %%w0", d)
	case 32:
		t.emit("cvt.u32.u64 %%w0, %s", d)
		t.emit("mov.u32 %%w1, 0")
		t.emit("prmt.b32 %%w0, %%w0, %%w1, 0x0123")
		t.emit("cvt.u64.u32 %s, %%w0", d)
	case 64:
		t.emit("cvt.u32.u64 %%w0, %s", d)
		t.emit("shr.u64 %%t0, %s, 32", d)
		t.emit("cvt.u32.u64 %%w2, %%t0")
		t.emit("mov.u32 %%w1, 0")
		t.emit("prmt.b32 %%w0, %%w0, %%w1, 0x0123")
		t.emit("prmt.b32 %%w2, %%w2, %%w1, 0x0123")
		t.emit("cvt.u64.u32 %s, %%w0", d)
		t.emit("shl.b64 %s, %s, 32", d, d)
		t.emit("cvt.u64.u32 %%t0, %%w2")
		t.emit("or.b64 %s, %s, %%t0", d, d)
	default:
		return fmt.Errorf("byte swap of %d bits", size)
	}
	return nil
}

func (t *progTranslator) alu32(ins asm.Instruction) error {
	d := reg(ins.Dst)
	op := ins.OpCode.ALUOp()
	if op == asm.Swap {
		if ins.OpCode.Endianness() == asm.BE {
			return t.bswap(ins.Dst, ins.Constant)
		}
		switch ins.Constant {
		case 16:
			t.emit("and.b64 %s, %s, 65535", d, d)
		case 32:
			t.emit("and.b64 %s, %s, 4294967295", d, d)
		case 64:
		default:
			return fmt.Errorf("to_le of %d bits", ins.Constant)
		}
		return nil
	}
	isImm := ins.OpCode.Source() == asm.ImmSource
	k := int64(int32(ins.Constant))
	b, ub := "%w1", "%w1" // for .s32 and for .u32/.b32 instructions
	if isImm {
		b, ub = simm(k, 32), uimm(k, 32)
	} else {
		t.emit("cvt.u32.u64 %%w1, %s", reg(ins.Src))
	}
	if op != asm.Mov && op != asm.MovSX8 && op != asm.MovSX16 {
		t.emit("cvt.u32.u64 %%w0, %s", d)
	}
	switch op {
	case asm.Add:
		t.emit("add.s32 %%w0, %%w0, %s", b)
	case asm.Sub:
		t.emit("sub.s32 %%w0, %%w0, %s", b)
	case asm.Mul:
		t.emit("mul.lo.s32 %%w0, %%w0, %s", b)
	case asm.Or:
		t.emit("or.b32 %%w0, %%w0, %s", ub)
	case asm.And:
		t.emit("and.b32 %%w0, %%w0, %s", ub)
	case asm.Xor:
		t.emit("xor.b32 %%w0, %%w0, %s", ub)
	case asm.Neg:
		t.emit("neg.s32 %%w0, %%w0")
	case asm.LSh, asm.RSh, asm.ArSh:
		ptxop := map[asm.ALUOp]string{asm.LSh: "shl.b32", asm.RSh: "shr.u32", asm.ArSh: "shr.s32"}[op]
		if isImm {
			t.emit("%s %%w0, %%w0, %d", ptxop, k&31)
		} else {
			t.emit("and.b32 %%w1, %%w1, 31")
			t.emit("%s %%w0, %%w0, %%w1", ptxop)
		}
	case asm.Mov:
		if isImm {
			t.emit("mov.u32 %%w0, %s", ub)
		} else {
			t.emit("mov.u32 %%w0, %%w1")
		}
	case asm.MovSX8, asm.MovSX16:
		if isImm {
			return fmt.Errorf("movsx with an immediate")
		}
		bits := map[asm.ALUOp]int{asm.MovSX8: 8, asm.MovSX16: 16}[op]
		t.emit("cvt.s32.s%d %%w0, %%w1", bits)
	case asm.Div, asm.SDiv, asm.Mod, asm.SMod:
		t.divmod(op, 32, "%w0", "%w0", b, isImm, k)
	default:
		return fmt.Errorf("alu32 op %v: %w", op, ErrUnsupported)
	}
	t.emit("cvt.u64.u32 %s, %%w0", d)
	return nil
}

var cmpOps = map[asm.JumpOp]struct{ cmp, sign string }{
	asm.JEq: {"eq", "u"}, asm.JNE: {"ne", "u"},
	asm.JGT: {"gt", "u"}, asm.JGE: {"ge", "u"}, asm.JLT: {"lt", "u"}, asm.JLE: {"le", "u"},
	asm.JSGT: {"gt", "s"}, asm.JSGE: {"ge", "s"}, asm.JSLT: {"lt", "s"}, asm.JSLE: {"le", "s"},
}

func (t *progTranslator) jump(ins asm.Instruction, tgt int) error {
	op := ins.OpCode.JumpOp()
	switch op {
	case asm.Exit:
		t.branched = true
		if t.inline {
			t.emit("bra %s", t.endLabel) // r0, the return value, is not used
			return nil
		}
		t.emit("st.param.b64 [__ret], %%r0")
		t.emit("ret")
		return nil
	case asm.Call:
		return t.call(ins, tgt)
	case asm.Ja:
		t.branched = true
		t.emit("bra %s", label(tgt))
		return nil
	}
	is32 := ins.OpCode.Class() == asm.Jump32Class
	if !is32 && ins.Dst <= asm.R9 && t.nonNull[ins.Dst] && ins.OpCode.Source() == asm.ImmSource && ins.Constant == 0 &&
		(op == asm.JEq || op == asm.JNE) {
		// the NULL test of an address that cannot be NULL
		if op == asm.JNE {
			t.branched = true
			t.emit("bra %s", label(tgt))
		} else {
			t.out.WriteString("\t// never NULL\n")
		}
		return nil
	}
	if !is32 && ins.Dst <= asm.R9 && t.zero[ins.Dst] && ins.OpCode.Source() == asm.ImmSource && ins.Constant == 0 &&
		(op == asm.JEq || op == asm.JNE) {
		// the leader test under the thread-0 guard: decided
		if op == asm.JEq {
			t.branched = true
			t.emit("bra %s", label(tgt))
		} else {
			t.out.WriteString("\t// thread 0: not taken\n")
		}
		return nil
	}
	t.branched = true
	a := reg(ins.Dst)
	isImm := ins.OpCode.Source() == asm.ImmSource
	bits := 64
	k := ins.Constant
	var b string
	if is32 {
		bits = 32
		t.emit("cvt.u32.u64 %%w0, %s", a)
		a = "%w0"
		if !isImm {
			t.emit("cvt.u32.u64 %%w1, %s", reg(ins.Src))
			b = "%w1"
		}
	} else if !isImm {
		b = reg(ins.Src)
	}
	lit := func(signed bool) string {
		if !isImm {
			return b
		}
		if signed {
			return simm(k, bits)
		}
		return uimm(k, bits)
	}
	if op == asm.JSet {
		if is32 {
			t.emit("and.b32 %%w0, %s, %s", a, lit(false))
			t.emit("setp.ne.u32 %%p0, %%w0, 0")
		} else {
			t.emit("and.b64 %%t0, %s, %s", a, lit(false))
			t.emit("setp.ne.u64 %%p0, %%t0, 0")
		}
	} else {
		c, ok := cmpOps[op]
		if !ok {
			return fmt.Errorf("jump op %v: %w", op, ErrUnsupported)
		}
		t.emit("setp.%s.%s%d %%p0, %s, %s", c.cmp, c.sign, bits, a, lit(c.sign == "s"))
	}
	t.emit("@%%p0 bra %s", label(tgt))
	return nil
}

func (t *progTranslator) helperCall(fn string, nargs int) {
	t.out.WriteString("\t{\n")
	var names []string
	for i := 0; i < nargs; i++ {
		n := fmt.Sprintf("__h%d", i)
		names = append(names, n)
		fmt.Fprintf(&t.out, "\t.param .b64 %s;\n", n)
		t.emit("st.param.b64 [%s], %s", n, reg(asm.R1+asm.Register(i)))
	}
	t.out.WriteString("\t.param .b64 __hr;\n")
	t.emit("call (__hr), %s, (%s)", fn, strings.Join(names, ", "))
	t.emit("ld.param.b64 %%r0, [__hr]")
	t.out.WriteString("\t}\n")
}

// ringbufOutput calls the helper's ringbuf_output(r1 map, r2 data, r3
// size, r4 flags). In a bpftime program, where every lane may emit a
// record, a ring that cannot take the record is seen inline first: the
// drop is counted once a warp (warpAdd) and the call skipped, with the
// helper's result (-devmap.EAGAIN). Without it every lane of a full ring added 1
// to the one drop counter; head only grows, so a ring full at that read
// stays full. Anything else (not a ring, flags, room) goes to the helper,
// which decides as before, or, in the inline form when the record is a
// known number of bytes at a known place on the stack (data and size: the
// program's registers of those, before the call), is written inline
// (ringRecord).
func (t *progTranslator) ringbufOutput(data, size asm.Register) {
	if !t.bt {
		t.helperCall(abi.FuncRingbufOut, 4)
		return
	}
	call := fmt.Sprintf("$L__pc%d", ringLabelBase+8*t.raw[t.cur])
	done := fmt.Sprintf("$L__pc%d", ringLabelBase+8*t.raw[t.cur]+1)
	drop := fmt.Sprintf("$L__pc%d", ringLabelBase+8*t.raw[t.cur]+2)
	einval := fmt.Sprintf("$L__pc%d", ringLabelBase+8*t.raw[t.cur]+3)
	off, offOK := t.flow.fpOff(t.cur, data)
	n, nOK := t.flow.constant(t.cur, size)
	inline := t.inline && t.stackSym != "" && offOK && nOK && off%8 == 0 && n > 0 && off+n <= 0
	t.out.WriteString("\t// a full ring: the drop counted once a warp, no call\n")
	// what the helper refuses (inline: flags other than NO_WAKEUP |
	// FORCE_WAKEUP, a map not a ring) or, calling it, any flags at all
	bad := call
	if inline {
		bad = einval
		t.emit("and.b64 %%t0, %%r4, -4")
		t.emit("setp.ne.u64 %%p0, %%t0, 0")
	} else {
		t.emit("setp.ne.u64 %%p0, %%r4, 0")
	}
	t.emit("@%%p0 bra %s", bad)
	t.emit("ld.u32 %%w0, [%%r1]")
	t.emit("setp.ne.u32 %%p0, %%w0, %d", abi.MapRingbuf)
	t.emit("@%%p0 bra %s", bad)
	t.emit("ld.u32 %%w0, [%%r1+12]")
	t.emit("cvt.u64.u32 %%t0, %%w0")
	t.emit("add.u64 %%t1, %%r3, 15")
	t.emit("and.b64 %%t1, %%t1, -8")
	t.emit("setp.gt.u64 %%p0, %%r3, %%t0")
	t.emit("@%%p0 add.u64 %%t1, %%t0, 1")
	t.emit("ld.volatile.u64 %%r0, [%%r1+%d]", abi.MapHdrSize)
	t.emit("add.u64 %%t2, %%t1, %%r0")
	t.emit("setp.le.u64 %%p0, %%t2, %%t0")
	t.emit("@%%p0 bra %s", call)
	// counted in the stripe of this warp's SM (abi.RingStripesOffset),
	// after the records (%t0: max_entries): on one word, every warp of a
	// launch queued on one address once the ring was full
	fmt.Fprintf(&t.out, "%s:\n", drop)
	t.emit("add.u64 %%t1, %%t0, %d", 7+16+abi.MapHdrSize)
	t.emit("and.b64 %%t1, %%t1, -8")
	t.emit("add.u64 %%t1, %%t1, %%r1")
	t.smStripe("%t2")
	t.emit("add.u64 %%t1, %%t1, %%t2")
	t.emit("cvta.to.global.u64 %%t1, %%t1")
	t.warpAdd("%t1", 64, 1, "")
	t.emit("mov.u64 %%r0, %d", -devmap.EAGAIN)
	t.emit("bra %s", done)
	fmt.Fprintf(&t.out, "%s:\n", call)
	if inline {
		t.ringRecord(off, n, drop)
		t.emit("bra %s", done)
		fmt.Fprintf(&t.out, "%s:\n", einval)
		t.emit("mov.u64 %%r0, %d", -devmap.EINVAL)
	} else {
		t.helperCall(abi.FuncRingbufOut, 4)
	}
	fmt.Fprintf(&t.out, "%s:\n", done)
}

// ringRecord writes the record the helper would, inline: it reserves
// %t1 bytes (8 + the size rounded up to 8) from head (%r0 as read, %t0
// the ring's size) with a compare-and-swap, going to drop when they no
// longer fit; writes the record's second word 0 and its n bytes of data,
// read from the stack at off (8-aligned); and stores the length last,
// after a fence, as the helper does ([u32 len][u32 0][data]). With no
// helper given a stack pointer, ptxas can keep the record in registers.
func (t *progTranslator) ringRecord(off, n int64, drop string) {
	loop := fmt.Sprintf("$L__pc%d", ringLabelBase+8*t.raw[t.cur]+ringLoopLabel)
	t.out.WriteString("\t// the record written inline: reserved with a compare-and-swap on head\n")
	fmt.Fprintf(&t.out, "%s:\n", loop)
	t.emit("add.u64 %%t2, %%t1, %%r0")
	t.emit("setp.gt.u64 %%p0, %%t2, %%t0")
	t.emit("@%%p0 bra %s", drop)
	t.emit("atom.cas.b64 %%t2, [%%r1+%d], %%r0, %%t2", abi.MapHdrSize)
	t.emit("setp.ne.u64 %%p0, %%t2, %%r0")
	t.emit("@%%p0 mov.u64 %%r0, %%t2")
	t.emit("@%%p0 bra %s", loop)
	t.emit("add.u64 %%t2, %%r1, %d", abi.MapHdrSize+16)
	t.emit("add.u64 %%t2, %%t2, %%r0")
	t.emit("mov.u32 %%w0, 0")
	t.emit("st.u32 [%%t2+4], %%w0")
	for i := int64(0); i < n; {
		w := int64(8)
		for i+w > n {
			w /= 2
		}
		r := "%t0"
		if w < 8 {
			r = "%w0"
		}
		t.emit("ld.local.u%d %s, [%s+%d]", w*8, r, t.stackSym, StackSize+off+i)
		t.emit("st.u%d [%%t2+%d], %s", w*8, 8+i, r)
		i += w
	}
	t.emit("membar.gl")
	t.emit("mov.u32 %%w0, %d", n)
	t.emit("atom.exch.b32 %%w1, [%%t2], %%w0")
	t.emit("mov.u64 %%r0, 0")
}

// ringLoopLabel: ringRecord's label, after ringbufOutput's four (each
// call site has 8 numbers: ringLabelBase + 8*raw + k).
const ringLoopLabel = 4

// ringLabelBase numbers ringbufOutput's labels past countNoRow's.
const ringLabelBase = 1 << 25

// dimSel loads the special register prefix.{x,y,z} picked by r1 (other
// values read 0) into %w0.
func (t *progTranslator) dimSel(sreg string) {
	t.emit("mov.u32 %%w0, 0")
	for i, c := range []string{"x", "y", "z"} {
		t.emit("setp.eq.u64 %%p0, %%r1, %d", i)
		t.emit("@%%p0 mov.u32 %%w0, %s.%s", sreg, c)
	}
}

// linear computes x + y*nx + z*nx*ny of a special register triple into %w0.
func (t *progTranslator) linear(idx, dim string) {
	for _, l := range linearPTX(idx, dim, "%w0", "%w1", "%w2") {
		t.emit("%s", l)
	}
}

// linearPTX: the instructions that set d to x + nx*(y + ny*z) of the
// triple idx (%ctaid or %tid) with dims dim, through scratch registers a
// and b (.b32). (A form that skipped the y and z reads for 1-D grids,
// predicated on the dims, ran slower on the H200: ptxas hoisted the reads
// out of the predicate as per-thread S2R and chained the dims' constant
// loads; launch-count went from 1.099x to 1.185x on the small kernel.)
func linearPTX(idx, dim, d, a, b string) []string {
	return []string{
		fmt.Sprintf("mov.u32 %s, %s.z", a, idx),
		fmt.Sprintf("mov.u32 %s, %s.y", b, dim),
		fmt.Sprintf("mov.u32 %s, %s.y", d, idx),
		fmt.Sprintf("mad.lo.u32 %s, %s, %s, %s", a, a, b, d),
		fmt.Sprintf("mov.u32 %s, %s.x", b, dim),
		fmt.Sprintf("mov.u32 %s, %s.x", d, idx),
		fmt.Sprintf("mad.lo.u32 %s, %s, %s, %s", d, a, b, d),
	}
}

func (t *progTranslator) call(ins asm.Instruction, tgt int) error {
	if ins.IsFunctionCall() {
		t.out.WriteString("\t{\n")
		var names []string
		for a := 1; a <= 5; a++ {
			fmt.Fprintf(&t.out, "\t.param .b64 __c%d;\n", a)
			t.emit("st.param.b64 [__c%d], %%r%d", a, a)
			names = append(names, fmt.Sprintf("__c%d", a))
		}
		t.out.WriteString("\t.param .b64 __cr;\n")
		t.emit("call (__cr), %s, (%s)", t.subName(tgt), strings.Join(names, ", "))
		t.emit("ld.param.b64 %%r0, [__cr]")
		t.out.WriteString("\t}\n")
		return nil
	}
	if !ins.IsBuiltinCall() {
		return fmt.Errorf("kfunc or special call: %w", ErrUnsupported)
	}
	id := ins.Constant
	k, known := t.lookups[t.cur]
	perThread := false
	if known {
		if l, err := devmap.SpecLayout(t.spec.Maps[k.mapName]); err == nil && l.Type == abi.MapPerThread {
			perThread = true
		}
	}
	if !perThread && (id == abi.HelperMapLookupElem || id == abi.HelperMapUpdateElem || id == abi.HelperMapDeleteElem) && t.callsPerThreadMap() && !known {
		return fmt.Errorf("a map call whose map is not known at the call, in a program using a per-thread map (its calls are inline address arithmetic: load the map right before the call): %w", ErrUnsupported)
	}
	if _, isBt := abi.BpftimeHelperNames[int32(id)]; isBt && !t.bt && abi.HelperNames[int32(id)] == "" {
		return fmt.Errorf("helper %d outside a bpftime-style (kprobe/KERNEL) program: %w", id, ErrUnsupported)
	}
	switch id {
	case abi.HelperMapLookupElem:
		if perThread {
			return t.perThreadAccess(k, false)
		}
		if known && t.inline {
			return t.inlineLookup(k)
		}
		t.helperCall(abi.FuncMapLookup, 2)
	case abi.HelperMapUpdateElem:
		if perThread {
			return t.perThreadAccess(k, true)
		}
		t.helperCall(abi.FuncMapUpdate, 4)
	case abi.HelperMapDeleteElem:
		t.helperCall(abi.FuncMapDelete, 2)
	case abi.HelperRingbufOutput:
		t.ringbufOutput(asm.R2, asm.R3)
	case abi.HelperKtimeGetNs, abi.HelperGlobaltimer:
		t.emit("mov.u64 %%r0, %%globaltimer")
	case abi.HelperSmpProcessorID, abi.HelperSmID:
		t.emit("mov.u32 %%w0, %%smid")
		t.emit("cvt.u64.u32 %%r0, %%w0")
	case abi.HelperLaneID:
		t.emit("mov.u32 %%w0, %%laneid")
		t.emit("cvt.u64.u32 %%r0, %%w0")
	case abi.HelperThreadIdx:
		t.dimSel("%tid")
		t.emit("cvt.u64.u32 %%r0, %%w0")
	case abi.HelperBlockIdx:
		t.dimSel("%ctaid")
		t.emit("cvt.u64.u32 %%r0, %%w0")
	case abi.HelperBlockDim:
		t.dimSel("%ntid")
		t.emit("cvt.u64.u32 %%r0, %%w0")
	case abi.HelperGridDim:
		t.dimSel("%nctaid")
		t.emit("cvt.u64.u32 %%r0, %%w0")
	case abi.HelperThreadLinearID:
		if t.thread0 {
			t.out.WriteString("\t// thread_linear_id under the thread-0 site guard\n")
			t.emit("mov.u64 %%r0, 0")
			t.zero[asm.R0] = true
			break
		}
		t.linear("%tid", "%ntid")
		t.emit("cvt.u64.u32 %%r0, %%w0")
	case abi.HelperWarpID:
		t.linear("%tid", "%ntid")
		t.emit("shr.u32 %%w0, %%w0, 5")
		t.emit("cvt.u64.u32 %%r0, %%w0")
	case abi.HelperGlobalThreadID:
		t.globalThreadID()
		t.emit("mov.u64 %%r0, %%t0")
	case abi.BtPuts, abi.BtTracePrintk:
		t.out.WriteString("\t// ebpf_puts / bpf_trace_printk: dropped on the device\n")
		t.emit("mov.u64 %%r0, 0")
	case abi.BtMembar:
		t.emit("membar.sys")
		t.emit("mov.u64 %%r0, 0")
	case abi.BtGlobaltimer:
		t.emit("mov.u64 %%r0, %%globaltimer")
	case abi.BtSmID:
		t.emit("mov.u32 %%w0, %%smid")
		t.emit("cvt.u64.u32 %%r0, %%w0")
	case abi.BtWarpID:
		t.emit("mov.u32 %%w0, %%warpid")
		t.emit("cvt.u64.u32 %%r0, %%w0")
	case abi.BtLaneID:
		t.emit("mov.u32 %%w0, %%laneid")
		t.emit("cvt.u64.u32 %%r0, %%w0")
	case abi.BtBlockIdx, abi.BtBlockDim, abi.BtThreadIdx, abi.BtGridDim:
		sreg := map[int64]string{abi.BtBlockIdx: "%ctaid", abi.BtBlockDim: "%ntid", abi.BtThreadIdx: "%tid", abi.BtGridDim: "%nctaid"}[id]
		for i, c := range []string{"x", "y", "z"} {
			t.emit("mov.u32 %%w0, %s.%s", sreg, c)
			t.emit("cvt.u64.u32 %%t0, %%w0")
			// to a known place on the stack: a .local store (ptxas keeps
			// the value in a register when no helper gets the stack)
			if off, ok := t.flow.fpOff(t.cur, asm.R1+asm.Register(i)); ok && t.inline && t.stackSym != "" && off%8 == 0 && off <= -8 {
				t.emit("st.local.u64 [%s+%d], %%t0", t.stackSym, StackSize+off)
				continue
			}
			t.emit("st.u64 [%s], %%t0", reg(asm.R1+asm.Register(i)))
		}
		t.emit("mov.u64 %%r0, 0")
	case abi.BtPidTgid:
		t.emit("ld.global.u64 %%r0, [%s]", abi.SymPidTgid)
	case abi.BtPerfOutput:
		// bpf_perf_event_output(ctx, map, flags, data, size): one record
		// in the ring, as ringbuf_output(map, data, size, 0)
		t.emit("mov.u64 %%r1, %%r2")
		t.emit("mov.u64 %%r2, %%r4")
		t.emit("mov.u64 %%r3, %%r5")
		t.emit("mov.u64 %%r4, 0")
		t.ringbufOutput(asm.R4, asm.R5)
	case abi.HelperBlockLinearID:
		if t.bslotName != "" {
			// the entry block computed it for the block slot, in this thread too (inlineAttach)
			t.emit("cvt.u64.u32 %%r0, %s", t.bslotName)
			break
		}
		if t.bslotReg {
			// this program's prologue computed it for the block slot
			t.emit("cvt.u64.u32 %%r0, %%__gxbslot")
			break
		}
		t.linear("%ctaid", "%nctaid")
		t.emit("cvt.u64.u32 %%r0, %%w0")
	default:
		return fmt.Errorf("helper %d: %w", id, ErrUnsupported)
	}
	return nil
}

// callsPerThreadMap: the program references a per-thread map.
func (t *progTranslator) callsPerThreadMap() bool {
	for _, k := range t.lookups {
		if l, err := devmap.SpecLayout(t.spec.Maps[k.mapName]); err == nil && l.Type == abi.MapPerThread {
			return true
		}
	}
	return false
}

// globalThreadID sets %t0 to the thread's linear index in the launch:
// block_linear_id * threads per block + thread_linear_id (64-bit).
func (t *progTranslator) globalThreadID() {
	t.linear("%ctaid", "%nctaid")
	t.emit("cvt.u64.u32 %%t0, %%w0")
	t.emit("mov.u32 %%w1, %%ntid.x")
	t.emit("mov.u32 %%w2, %%ntid.y")
	t.emit("mul.lo.u32 %%w1, %%w1, %%w2")
	t.emit("mov.u32 %%w2, %%ntid.z")
	t.emit("mul.lo.u32 %%w1, %%w1, %%w2")
	t.emit("cvt.u64.u32 %%t1, %%w1")
	t.emit("mul.lo.u64 %%t0, %%t0, %%t1")
	t.linear("%tid", "%ntid")
	t.emit("cvt.u64.u32 %%t1, %%w0")
	t.emit("add.u64 %%t0, %%t0, %%t1")
}

// countNoRow counts, in the u64s from map + noRow, the lanes where pred
// (%p1-%p3: the thread has a row, or the access is refused before) is
// false. The lanes of a warp past the last row add to one address, so one
// atomic a warp (warpAdd); the warps of a launch add to the stripe of their
// SM (%smid % abi.MapNoRowStripes, abi.MapNoRowStripe bytes apart):
// on one address, a launch of millions of threads past the rows waited on
// about one atomic a clock there (llama.cpp's copy kernels on the H200).
// The lanes with a row jump over it.
func (t *progTranslator) countNoRow(noRow uint64, pred string) {
	skip := fmt.Sprintf("$L__pc%d", noRowLabelBase+t.raw[t.cur])
	t.emit("@%s bra %s", pred, skip)
	t.smStripe("%t1")
	t.emit("add.u64 %%t1, %%t1, %%r1")
	t.emit("add.u64 %%t1, %%t1, %d", noRow)
	t.emit("cvta.to.global.u64 %%t1, %%t1")
	t.warpAdd("%t1", 64, 1, "")
	fmt.Fprintf(&t.out, "%s:\n", skip)
}

// smStripe sets the .b64 register dst to the byte offset of this warp's
// stripe among a map's striped counts (gpuext_abi.h
// GPUEXT_DMAP_NOROW_STRIPES): %smid % abi.MapNoRowStripes, times
// abi.MapNoRowStripe. Uses %w1.
func (t *progTranslator) smStripe(dst string) {
	t.emit("mov.u32 %%w1, %%smid")
	t.emit("and.b32 %%w1, %%w1, %d", abi.MapNoRowStripes-1)
	t.emit("mul.wide.u32 %s, %%w1, %d", dst, abi.MapNoRowStripe)
}

// noRowLabelBase numbers countNoRow's labels past any instruction's.
const noRowLabelBase = 1 << 24

// perThreadMaxCopy is the largest value a per-thread update copies (byte by
// byte, unrolled); larger values are written through the looked-up pointer.
const perThreadMaxCopy = 64

// perThreadAccess emits a lookup (r0 = the value's address, or 0) or an
// update (r0 = 0 / -errno) of a per-thread map, inline: the thread's row
// is its linear id in the launch; a thread past the last row finds none
// and is counted in the u64 after the rows (devmap.Image is the spec).
func (t *progTranslator) perThreadAccess(k inlineKey, update bool) error {
	ms := t.spec.Maps[k.mapName]
	l, err := devmap.SpecLayout(ms)
	if err != nil {
		return err
	}
	if update && l.ValueSize > perThreadMaxCopy {
		return fmt.Errorf("map_update_elem on per-thread map %q with %d-byte values (at most %d): write through the looked-up value: %w", k.mapName, l.ValueSize, perThreadMaxCopy, ErrUnsupported)
	}
	what := "lookup"
	if update {
		what = "update"
	}
	fmt.Fprintf(&t.out, "\t// map_%s_elem(%s): the thread's own row, inline\n", what, k.mapName)
	t.globalThreadID()
	t.emit("setp.lt.u64 %%p1, %%t0, %d", l.NBuckets)
	t.emit("ld.u8 %%w0, [%%r2]")
	for b := 1; b < 4; b++ {
		t.emit("ld.u8 %%w1, [%%r2+%d]", b)
		t.emit("shl.b32 %%w1, %%w1, %d", 8*b)
		t.emit("or.b32 %%w0, %%w0, %%w1")
	}
	t.emit("setp.lt.u32 %%p2, %%w0, %d", l.MaxEntries)
	t.emit("and.pred %%p2, %%p2, %%p1")
	t.emit("mul.lo.u64 %%t0, %%t0, %d", l.MaxEntries)
	t.emit("cvt.u64.u32 %%t1, %%w0")
	t.emit("add.u64 %%t0, %%t0, %%t1")
	t.emit("mul.lo.u64 %%t0, %%t0, %d", l.Stride)
	t.emit("add.u64 %%t0, %%t0, %%r1")
	t.emit("add.u64 %%t0, %%t0, %d", abi.MapHdrSize)
	noRow := uint64(abi.MapHdrSize) + uint64(l.NBuckets)*uint64(l.MaxEntries)*uint64(l.Stride)
	if !update {
		t.emit("mov.u64 %%r0, 0")
		t.emit("@%%p2 mov.u64 %%r0, %%t0")
		t.countNoRow(noRow, "%p1")
		return nil
	}
	// flags > BPF_EXIST: -devmap.EINVAL before anything; no row: -devmap.E2BIG, counted;
	// index out of range: -devmap.E2BIG; BPF_NOEXIST: -devmap.EEXIST (an entry exists)
	t.emit("mov.u64 %%r0, %d", -devmap.E2BIG)
	t.emit("setp.gt.u64 %%p0, %%r4, %d", devmap.FlagExist)
	t.emit("@%%p0 mov.u64 %%r0, %d", -devmap.EINVAL)
	// counted when the flags are good and the thread has no row
	t.emit("or.pred %%p3, %%p1, %%p0")
	t.countNoRow(noRow, "%p3")
	t.emit("not.pred %%p0, %%p0")
	t.emit("and.pred %%p2, %%p2, %%p0")
	t.emit("setp.eq.u64 %%p0, %%r4, %d", devmap.FlagNoExist)
	t.emit("and.pred %%p0, %%p0, %%p2")
	t.emit("@%%p0 mov.u64 %%r0, %d", -devmap.EEXIST)
	t.emit("not.pred %%p0, %%p0")
	t.emit("and.pred %%p2, %%p2, %%p0")
	for b := uint32(0); b < (l.ValueSize+7)&^7; b++ {
		if b < l.ValueSize {
			t.emit("@%%p2 ld.u8 %%w0, [%%r3+%d]", b)
		} else {
			t.emit("mov.u32 %%w0, 0")
		}
		t.emit("@%%p2 st.u8 [%%t0+%d], %%w0", b)
	}
	t.emit("@%%p2 mov.u64 %%r0, 0")
	return nil
}

// warpAdd emits an atomic add of the constant c at the global address in
// addr by every active lane, as one atomic per warp and address: the lanes
// that share an address (match.any) elect the lowest, which adds c times
// their number. With old != "" each lane gets what a serial order of the
// lanes' own atomics would have left it (the leader's old value, shuffled
// to the group, plus c for every lane of the group below it). Used where
// every lane of a warp may add to the same map value (bpftime sections, a
// per-thread map's no-row count): without it the adds queue one by one at
// the L2 slice, ~1 per cycle (a 480k-thread kernel paid ~270 us a launch).
// Uses %w3-%w7, %t2 and %p3; addr must not be one of them.
func (t *progTranslator) warpAdd(addr string, bits int, c uint64, old string) {
	t.warp = true
	t.out.WriteString("\t// one atomic a warp and address\n")
	t.emit("activemask.b32 %%w3")
	t.emit("match.any.sync.b64 %%w4, %s, %%w3", addr)
	t.emit("mov.u32 %%w5, %%lanemask_lt")
	t.emit("and.b32 %%w5, %%w5, %%w4")
	t.emit("setp.eq.u32 %%p3, %%w5, 0")
	t.emit("popc.b32 %%w6, %%w4")
	t.emit("cvt.u64.u32 %%t2, %%w6")
	if c != 1 {
		t.emit("mul.lo.u64 %%t2, %%t2, %d", c)
	}
	if old == "" {
		if bits == 32 {
			t.emit("cvt.u32.u64 %%w6, %%t2")
			t.emit("@%%p3 red.global.add.u32 [%s], %%w6", addr)
		} else {
			t.emit("@%%p3 red.global.add.u64 [%s], %%t2", addr)
		}
		return
	}
	if bits == 32 {
		t.emit("cvt.u32.u64 %%w6, %%t2")
		t.emit("@%%p3 atom.global.add.u32 %%w7, [%s], %%w6", addr)
		t.emit("brev.b32 %%w6, %%w4")
		t.emit("bfind.shiftamt.u32 %%w6, %%w6")
		t.emit("shfl.sync.idx.b32 %%w7, %%w7, %%w6, 31, %%w4")
		t.emit("cvt.u64.u32 %s, %%w7", old)
	} else {
		t.emit("@%%p3 atom.global.add.u64 %s, [%s], %%t2", old, addr)
		t.emit("brev.b32 %%w6, %%w4")
		t.emit("bfind.shiftamt.u32 %%w6, %%w6")
		t.emit("cvt.u32.u64 %%w7, %s", old)
		t.emit("shfl.sync.idx.b32 %%w7, %%w7, %%w6, 31, %%w4")
		t.emit("cvt.u64.u32 %%t2, %%w7")
		t.emit("shr.u64 %s, %s, 32", old, old)
		t.emit("cvt.u32.u64 %%w7, %s", old)
		t.emit("shfl.sync.idx.b32 %%w7, %%w7, %%w6, 31, %%w4")
		t.emit("cvt.u64.u32 %s, %%w7", old)
		t.emit("shl.b64 %s, %s, 32", old, old)
		t.emit("or.b64 %s, %s, %%t2", old, old)
	}
	// the lanes of the group below this one added first
	t.emit("popc.b32 %%w5, %%w5")
	t.emit("cvt.u64.u32 %%t2, %%w5")
	if c != 1 {
		t.emit("mul.lo.u64 %%t2, %%t2, %d", c)
	}
	t.emit("add.u64 %s, %s, %%t2", old, old)
	if bits == 32 {
		t.emit("and.b64 %s, %s, 4294967295", old, old)
	}
}

// fusedAdd emits a load, add, store of one shared map value as one atomic
// add (the verifier's Result.FusedAdds): rA = old + x, as the three would
// leave it, and no other thread's add between the load and the store is
// lost.
func (t *progTranslator) fusedAdd(ld asm.Instruction) error {
	i := t.cur
	add, st := t.list[i+1], t.list[i+2]
	rL, rR, ok := verifier.FusedShape(ld, add, st)
	if !ok {
		return fmt.Errorf("insn %d: not a load, add, store of one address: %w", t.raw[i], ErrUnsupported)
	}
	bits := sizeBits[ld.OpCode.Size()]
	t.out.WriteString("\t// load, add, store of one map value: one atomic add\n")
	// %t1: the addend (the add's other operand), zero-extended for a 32-bit add
	switch {
	case rL != rR:
		t.emit("mov.u64 %%t1, %s", reg(rR))
	case add.OpCode.Source() == asm.RegSource:
		t.emit("mov.u64 %%t1, %s", reg(add.Src))
	default:
		t.emit("mov.u64 %%t1, %s", uimm(add.Constant, 64))
	}
	alu32 := add.OpCode.Class() == asm.ALUClass
	if alu32 {
		t.emit("and.b64 %%t1, %%t1, 4294967295")
	}
	t.emit("add.s64 %%t0, %s, %d", reg(ld.Src), ld.Offset)
	t.emit("cvta.to.global.u64 %%t0, %%t0")
	if t.bt && rL == rR && add.OpCode.Source() != asm.RegSource {
		// every lane of a bpftime program may add here, most to the same
		// value (a histogram's bin): one atomic a warp and address
		c := uint64(add.Constant)
		if alu32 || bits == 32 {
			c = uint64(uint32(c))
		}
		t.warpAdd("%t0", bits, c, reg(rL))
	} else if bits == 32 {
		t.emit("cvt.u32.u64 %%w1, %%t1")
		t.emit("atom.global.add.u32 %%w0, [%%t0], %%w1")
		t.emit("cvt.u64.u32 %s, %%w0", reg(rL))
	} else {
		t.emit("atom.global.add.u64 %s, [%%t0], %%t1", reg(rL))
	}
	// what the add left in its destination (the store wrote its low bits)
	t.emit("add.u64 %s, %s, %%t1", reg(rR), reg(rL))
	if alu32 {
		t.emit("and.b64 %s, %s, 4294967295", reg(rR), reg(rR))
	}
	if t.skip == nil {
		t.skip = map[int]bool{}
	}
	t.skip[t.raw[i+1]] = true
	t.skip[t.raw[i+2]] = true
	return nil
}

func (t *progTranslator) atomic(ins asm.Instruction) error {
	op := ins.OpCode.AtomicOp()
	size := ins.OpCode.Size()
	if size != asm.Word && size != asm.DWord {
		return fmt.Errorf("atomic of size %v: %w", size, ErrUnsupported)
	}
	bits := sizeBits[size]
	if d := t.dfr; d != nil && op == asm.AddAtomic && size == asm.DWord && ins.Dst <= asm.R9 && ins.Offset == 0 && t.nonNull[ins.Dst] && t.blockSlot[t.elem[ins.Dst].mapName] {
		e := t.elem[ins.Dst]
		if t.dfrEntry && !t.branched {
			// the entry's count, deferred to the exit (deferSet);
			// only one every block makes (no undecided branch before
			// it): one that few blocks make (block 0's launch) would
			// cost every block a register through the kernel and a
			// test at its exit, and save nothing
			acc := d.reg(e, true)
			t.out.WriteString("\t// deferred to the exit\n")
			t.emit("add.u64 %s, %s, %s", acc, acc, reg(ins.Src))
			return nil
		}
		if acc := d.reg(e, false); acc != "" {
			// the exit's add takes the entry's with it
			if !t.branched {
				d.merged[e] = true // on every path: nothing left for the flush
			}
			t.emit("add.s64 %%t1, %s, %d", reg(ins.Dst), ins.Offset)
			t.emit("cvta.to.global.u64 %%t1, %%t1")
			t.emit("add.u64 %%t0, %s, %s", reg(ins.Src), acc)
			t.emit("mov.u64 %s, 0", acc)
			t.emit("red.global.add.u64 [%%t1], %%t0")
			return nil
		}
	}
	// The verifier allows atomics on map values only, and maps live in
	// .global: the global state space keeps ptxas from emitting a generic
	// ATOM whose "was it global?" predicate the thread must wait for.
	t.emit("add.s64 %%t1, %s, %d", reg(ins.Dst), ins.Offset)
	t.emit("cvta.to.global.u64 %%t1, %%t1")
	s := reg(ins.Src)
	v, old := s, "%t0"
	if bits == 32 {
		t.emit("cvt.u32.u64 %%w1, %s", s)
		v, old = "%w1", "%w0"
	}
	var ptxop string
	fetch := true
	switch op {
	case asm.AddAtomic, asm.FetchAdd:
		ptxop, fetch = fmt.Sprintf("add.u%d", bits), op == asm.FetchAdd
	case asm.AndAtomic, asm.FetchAnd:
		ptxop, fetch = fmt.Sprintf("and.b%d", bits), op == asm.FetchAnd
	case asm.OrAtomic, asm.FetchOr:
		ptxop, fetch = fmt.Sprintf("or.b%d", bits), op == asm.FetchOr
	case asm.XorAtomic, asm.FetchXor:
		ptxop, fetch = fmt.Sprintf("xor.b%d", bits), op == asm.FetchXor
	case asm.Xchg:
		ptxop = fmt.Sprintf("exch.b%d", bits)
	case asm.CmpXchg:
		if bits == 32 {
			t.emit("cvt.u32.u64 %%w2, %%r0")
			t.emit("atom.global.cas.b32 %%w0, [%%t1], %%w2, %%w1")
			t.emit("cvt.u64.u32 %%r0, %%w0")
		} else {
			t.emit("atom.global.cas.b64 %%r0, [%%t1], %%r0, %s", s)
		}
		return nil
	default:
		return fmt.Errorf("atomic op %v: %w", op, ErrUnsupported)
	}
	if !fetch {
		// No result wanted: a reduction, which the SM issues and does not
		// wait for (an atom's result would hold the thread for the L2
		// round trip).
		t.emit("red.global.%s [%%t1], %s", ptxop, v)
		return nil
	}
	t.emit("atom.global.%s %s, [%%t1], %s", ptxop, old, v)
	if bits == 32 {
		t.emit("cvt.u64.u32 %s, %%w0", s)
	} else {
		t.emit("mov.u64 %s, %%t0", s)
	}
	return nil
}

// clobber forgets what the registers the instruction writes held (nonNull),
// and copies it with a 64-bit register move.
func (t *progTranslator) clobber(ins asm.Instruction) {
	op := ins.OpCode
	switch cls := op.Class(); {
	case cls.IsJump():
		if op.JumpOp() == asm.Call {
			for r := asm.R0; r <= asm.R5; r++ {
				t.nonNull[r], t.zero[r] = false, false
			}
		}
	case cls == asm.ALU64Class && op.ALUOp() == asm.Mov && op.Source() == asm.RegSource && ins.Dst <= asm.R9 && ins.Src <= asm.R9:
		t.nonNull[ins.Dst], t.elem[ins.Dst], t.zero[ins.Dst] = t.nonNull[ins.Src], t.elem[ins.Src], t.zero[ins.Src]
	case cls.IsALU(), cls == asm.LdClass, cls == asm.LdXClass:
		if ins.Dst <= asm.R9 {
			t.nonNull[ins.Dst], t.zero[ins.Dst] = false, false
		}
	case cls == asm.StXClass && op.Mode() == asm.AtomicMode:
		// a fetch writes src (conservatively: any atomic), a cmpxchg r0
		if op.AtomicOp() == asm.CmpXchg {
			t.nonNull[asm.R0], t.zero[asm.R0] = false, false
		}
		if ins.Src <= asm.R9 {
			t.nonNull[ins.Src], t.zero[ins.Src] = false, false
		}
	}
}
