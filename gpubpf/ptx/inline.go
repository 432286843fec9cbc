package ptx

import (
	"fmt"
	"math"
	"regexp"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/devmap"
)

// The inline form of an attach point (docs/device-probes.md, "Inline
// splice"): the programs of the attach point as one PTX block the patcher
// pastes at the site instead of the call to the dispatch function, so the
// kernel sees straight-line code and no call ABI. The text is a template:
//
//	// comments
//	.local ...;          declarations the patcher hoists to the entry's
//	                     leading declarations (function scope)
//	{                    the block, from the first line that is "{"
//	...
//	}
//
// with two placeholders the patcher replaces: InlineSite (a number unique
// per site of the module, so every label and .local name is unique) and
// InlineKernelID (the kernel id, an unsigned hex literal). Registers are
// declared inside the block and named %__gx*, labels $__gpuext_i<site>_*,
// so nothing collides with the kernel's own names ($L__..., %r, %rd, ...).
// A program's exit is a branch to the end of its own block; its return
// value is not used (as in the dispatch).
const (
	InlineSite     = abi.InlineSite
	InlineKernelID = abi.InlineKernelID
	// GuardMark is the comment line of a template translated for the
	// thread-0 site guard: the patcher (GPUEXT_DEVRT_INLINE_GUARD_MARK,
	// devrt/include/gpuext_devrt_probes.h) then runs it under the guard
	// whatever module.conf says.
	GuardMark = abi.InlineGuardMark
	// SharedSlotReg is the kernel-scope register the entry block sets to
	// the block's linear index and the exit block reads (a per-warp map
	// updated only atomically takes its slot from it).
	SharedSlotReg = "%__gxbs" + InlineSite
)

// InlineFile is the bundle file of an attach point's inline form
// (abi.InlineEntryFile, abi.InlineExitFile).
func InlineFile(a abi.Attach) string {
	if a == abi.KernelExit {
		return abi.InlineExitFile
	}
	return abi.InlineEntryFile
}

// inlineKey is a map_lookup_elem whose map is known statically.
type inlineKey struct {
	mapName  string
	keyOff   int64  // r2 = r10 + keyOff
	keyKnow  bool   // keyOff is known
	keyConst bool   // the key's 4 bytes hold a known constant
	keyVal   uint32 // that constant
}

// knownLookups finds the lookup calls of the main function whose r1 holds
// one known map (ld_imm64 of it earlier in the same basic block, possibly
// through register copies) and whose map is an ARRAY or PER_WARP. It also
// notes r2's stack offset when known (an aligned key loads as one word).
// Conservative: state is forgotten at every jump target and call.
func knownLookups(spec *ebpf.CollectionSpec, insns asm.Instructions, raw []int, targets map[int]bool, funcOf []int) map[int]inlineKey {
	type rs struct {
		mapName string
		stack   bool
		off     int64
		konst   bool // holds the constant kval
		kval    int64
	}
	var regs [11]rs
	slots := map[int64]uint32{} // stack offset -> the constant u32 stored there
	clear := func() { regs = [11]rs{}; slots = map[int64]uint32{} }
	store := func(off int64, size asm.Size, v rs) {
		n := int64(size.Sizeof())
		for o := range slots {
			if o < off+n && off < o+4 {
				delete(slots, o)
			}
		}
		if v.konst && (size == asm.Word || size == asm.DWord) {
			slots[off] = uint32(v.kval)
		}
	}
	out := map[int]inlineKey{}
	for i, ins := range insns {
		if funcOf[i] != 0 {
			continue
		}
		if targets[raw[i]] {
			clear()
		}
		op := ins.OpCode
		cls := op.Class()
		src := func() rs {
			if ins.Src == asm.R10 {
				return rs{stack: true}
			}
			if ins.Src <= asm.R9 {
				return regs[ins.Src]
			}
			return rs{}
		}
		switch {
		case cls.IsJump():
			if op.JumpOp() == asm.Call {
				if ins.IsBuiltinCall() && (ins.Constant == abi.HelperMapLookupElem || ins.Constant == abi.HelperMapUpdateElem) && regs[asm.R1].mapName != "" {
					if ms, ok := spec.Maps[regs[asm.R1].mapName]; ok {
						if l, err := devmap.SpecLayout(ms); err == nil && (l.Type == abi.MapArray || l.Type == abi.MapPerWarp || l.Type == abi.MapPerThread) && l.KeySize == 4 {
							k := inlineKey{mapName: regs[asm.R1].mapName, keyOff: regs[asm.R2].off, keyKnow: regs[asm.R2].stack}
							if v, ok := slots[k.keyOff]; ok && k.keyKnow {
								k.keyConst, k.keyVal = true, v
							}
							out[i] = k
						}
					}
				}
				if ins.IsFunctionCall() {
					clear()
				} else {
					for r := asm.R0; r <= asm.R5; r++ {
						regs[r] = rs{}
					}
				}
			}
		case cls == asm.StClass || cls == asm.StXClass && op.Mode() == asm.MemMode:
			// a store: to a known stack offset it sets or spoils that
			// slot's constant; through any other pointer (it might point
			// into the stack) it spoils them all
			v := rs{konst: cls == asm.StClass, kval: ins.Constant}
			if cls == asm.StXClass && ins.Src <= asm.R9 {
				v = regs[ins.Src]
			}
			switch {
			case ins.Dst == asm.R10:
				store(int64(ins.Offset), op.Size(), v)
			case ins.Dst <= asm.R9 && regs[ins.Dst].stack:
				store(regs[ins.Dst].off+int64(ins.Offset), op.Size(), v)
			default:
				slots = map[int64]uint32{}
			}
		case cls == asm.LdClass && op.IsDWordLoad() && ins.Dst <= asm.R9:
			if ins.Src == asm.PseudoMapFD {
				regs[ins.Dst] = rs{mapName: ins.Reference()}
			} else {
				regs[ins.Dst] = rs{}
			}
		case cls == asm.ALU64Class && ins.Dst <= asm.R9:
			d := regs[ins.Dst]
			switch {
			case op.ALUOp() == asm.Mov && op.Source() == asm.RegSource:
				regs[ins.Dst] = src()
			case op.ALUOp() == asm.Add && op.Source() == asm.ImmSource && d.stack:
				regs[ins.Dst] = rs{stack: true, off: d.off + ins.Constant}
			case op.ALUOp() == asm.Mov && op.Source() == asm.ImmSource:
				regs[ins.Dst] = rs{konst: true, kval: ins.Constant}
			default:
				regs[ins.Dst] = rs{}
			}
		case cls == asm.ALUClass && ins.Dst <= asm.R9 && op.ALUOp() == asm.Mov && op.Source() == asm.ImmSource:
			regs[ins.Dst] = rs{konst: true, kval: int64(uint32(ins.Constant))}
		case (cls == asm.ALUClass || cls == asm.LdXClass) && ins.Dst <= asm.R9:
			regs[ins.Dst] = rs{}
		case cls == asm.StXClass && op.Mode() == asm.AtomicMode:
			if ins.Src <= asm.R9 {
				regs[ins.Src] = rs{}
			}
			regs[asm.R0] = rs{}
		}
	}
	return out
}

// inlineLookup emits r0 = &value of the key at r2 in the map at r1, or 0
// when the index is out of range: what the helper library does for ARRAY
// (32 + idx*stride + 8) and PER_WARP (32 + (slot*max + idx)*stride, slot =
// (%smid*64 + %warpid) % nslots), with the layout known here.
func (t *progTranslator) inlineLookup(k inlineKey) error {
	l, err := devmap.SpecLayout(t.spec.Maps[k.mapName])
	if err != nil {
		return err
	}
	fmt.Fprintf(&t.out, "\t// map_lookup_elem(%s) inline\n", k.mapName)
	if k.keyConst && k.keyVal < l.MaxEntries {
		// a constant key in range: an address that cannot be NULL, so
		// the program's NULL test on it folds away (nonNull)
		fmt.Fprintf(&t.out, "\t// key %d: in range\n", k.keyVal)
		t.emit("mov.u64 %%t0, %d", k.keyVal)
		t.valueAddr(k, l)
		t.emit("mov.u64 %%r0, %%t0")
		t.nonNull[asm.R0], t.elem[asm.R0] = true, deferElem{k.mapName, k.keyVal}
		return nil
	}
	switch {
	case k.keyKnow && t.stackSym != "" && k.keyOff < 0 && k.keyOff >= -StackSize && k.keyOff%4 == 0:
		// the key's stack slot by name: ptxas sees the store that wrote it
		t.emit("ld.local.u32 %%w0, [%s+%d]", t.stackSym, StackSize+k.keyOff)
	case k.keyKnow && k.keyOff%4 == 0:
		t.emit("ld.u32 %%w0, [%%r2]")
	default: // alignment unknown: byte by byte, little-endian
		t.emit("ld.u8 %%w0, [%%r2]")
		for b := 1; b < 4; b++ {
			t.emit("ld.u8 %%w1, [%%r2+%d]", b)
			t.emit("shl.b32 %%w1, %%w1, %d", 8*b)
			t.emit("or.b32 %%w0, %%w0, %%w1")
		}
	}
	t.emit("setp.lt.u32 %%p1, %%w0, %d", l.MaxEntries)
	t.emit("cvt.u64.u32 %%t0, %%w0")
	t.valueAddr(k, l)
	t.emit("mov.u64 %%r0, 0")
	t.emit("@%%p1 mov.u64 %%r0, %%t0")
	return nil
}

// valueAddr turns the index in %t0 into the value's address in %t0 (map
// at r1): ARRAY 32 + idx*stride + 8, PER_WARP 32 + (slot*max + idx)*stride.
// The slot's offset is one 32x32->64 multiply-add (slot*max*stride + r1)
// where it fits, not a 64-bit multiply of the sum.
//
// Under the thread-0 site guard the address also gets %tid.x added, which
// is 0 there: it changes no address, but ptxas can no longer prove the
// address the same in every lane, and so emits the atomic as it is instead
// of aggregating it over the warp (VOTEU.ANY, UFLO, UPOPC, a %laneid read
// and the leader test, in series before the probing thread's RED; seen in
// the H200's SASS of the spliced small kernel). One active lane never needs
// the aggregation.
func (t *progTranslator) valueAddr(k inlineKey, l abi.MapLayout) {
	hdr := uint64(abi.MapHdrSize) + 8
	t.emit("mul.lo.u64 %%t0, %%t0, %d", l.Stride)
	if l.Type == abi.MapPerWarp {
		hdr = abi.MapHdrSize
		t.warpSlot(k, l)
		if span := uint64(l.MaxEntries) * uint64(l.Stride); span <= math.MaxUint32 {
			t.emit("mad.wide.u32 %%t1, %%w1, %d, %%r1", span)
		} else {
			t.emit("cvt.u64.u32 %%t1, %%w1")
			t.emit("mad.lo.u64 %%t1, %%t1, %d, %%r1", span)
		}
		t.emit("add.u64 %%t0, %%t0, %%t1")
	} else {
		t.emit("add.u64 %%t0, %%t0, %%r1")
	}
	t.emit("add.u64 %%t0, %%t0, %d", hdr)
	if t.thread0 {
		t.emit("mov.u32 %%w2, %%tid.x")
		t.emit("cvt.u64.u32 %%t1, %%w2")
		t.out.WriteString("\t// + %tid.x (0 under the guard): no warp aggregation\n")
		t.emit("add.u64 %%t0, %%t0, %%t1")
	}
}

// warpSlot sets %w1 to the slot of a per-warp map: the block's (a map
// updated only atomically) or the warp's.
func (t *progTranslator) warpSlot(k inlineKey, l abi.MapLayout) {
	if t.blockSlot[k.mapName] {
		name := "%__gxbslot"
		if t.bslotName != "" {
			name = t.bslotName
		}
		t.emit("mov.u32 %%w1, %s", name)
	} else if t.slotReg {
		t.emit("mov.u32 %%w1, %%__gxslot")
	} else {
		t.emit("mov.u32 %%w1, %%smid")
		t.emit("mov.u32 %%w2, %%warpid")
		t.emit("mad.lo.u32 %%w1, %%w1, 64, %%w2")
	}
	if n := l.NBuckets; n&(n-1) == 0 {
		t.emit("and.b32 %%w1, %%w1, %d", n-1) // ptxas turns a rem by a power of two into a reciprocal
	} else {
		t.emit("rem.u32 %%w1, %%w1, %d", n)
	}
}

var (
	inlineRegRe   = regexp.MustCompile(`%([rtwp])([0-9]+)\b`)
	inlineLabelRe = regexp.MustCompile(`\$L__pc([0-9]+)\b`)
)

// inlineAttach renders the inline template of one attach point: the
// context (as the dispatch builds it) and each program in order.
//
// guarded: the patcher runs the block in thread 0 of the block only
// (module.conf guard_* thread0, decided with the text by the same
// Module.Guard), so thread_linear_id is the constant 0 there: the
// program's own leader test folds away.
//
// sharedSlot: the entry block declares (kernel scope) and sets the block's
// slot register SharedSlotReg; the exit block's programs read it.
// entryGuarded: the entry block runs in thread 0 only, so only a block
// guarded the same way may read SharedSlotReg (in any other thread it was
// never set); an unguarded exit block computes its own slot.
//
// dfr (nil: none): the entry's counts deferred to the exit (deferSet).
func inlineAttach(spec *ebpf.CollectionSpec, a abi.Attach, progs []string, guarded bool, blockSlot map[string]bool, sharedSlot, entryGuarded bool, fused map[string][]int, dfr *deferSet) (string, error) {
	tag := strings.TrimPrefix(a.String(), "kernel_")
	pre := "__gpuext_i" + InlineSite + "_" + tag
	ctx, stack := pre+"_ctx", pre+"_stack"
	var b strings.Builder
	fmt.Fprintf(&b, "// gpuext inline probe: %s (generated by gpubpf/ptx; do not edit)\n", a)
	fmt.Fprintf(&b, "// %s: the site number, %s: the kernel id; the patcher replaces both.\n", InlineSite, InlineKernelID)
	if guarded && len(progs) > 0 {
		b.WriteString(GuardMark + "\n")
	}
	if len(progs) == 0 {
		b.WriteString("{\n}\n")
		return b.String(), nil
	}
	useCtx := false
	for _, name := range progs {
		if ps := spec.Programs[name]; ps == nil || readsCtx(ps.Instructions) {
			useCtx = true
		}
	}
	if useCtx {
		fmt.Fprintf(&b, ".local .align 8 .b8 %s[24];\n", ctx)
	}
	fmt.Fprintf(&b, ".local .align 8 .b8 %s[%d];\n", stack, StackSize)
	if sharedSlot && a == abi.KernelEntry {
		fmt.Fprintf(&b, ".reg .b32 %s;\n", SharedSlotReg)
	}
	if dfr != nil && a == abi.KernelEntry {
		b.WriteString(deferDeclMark)
	}
	b.WriteString("{\n")
	if dfr != nil && a == abi.KernelEntry {
		b.WriteString(deferInitMark)
	}
	if sharedSlot && a == abi.KernelEntry {
		// the block's linear index, for the per-warp maps updated only atomically
		b.WriteString("\t{\n\t.reg .b32 %__gxs<2>;\n")
		for _, l := range linearPTX("%ctaid", "%nctaid", SharedSlotReg, "%__gxs0", "%__gxs1") {
			fmt.Fprintf(&b, "\t%s;\n", l)
		}
		b.WriteString("\t}\n")
	}
	if useCtx {
		b.WriteString("\t.reg .b64 %__gxc<3>;\n\t.reg .b32 %__gxe<2>;\n")
		writeCtx(&b, ctx, "%__gxc", "%__gxe", "mov.b64 %__gxc0, "+InlineKernelID, a)
	} else {
		b.WriteString("\t// no program reads its context: none is built\n")
	}
	for k, name := range progs {
		ps := spec.Programs[name]
		end := fmt.Sprintf("$%s_p%d_end", pre, k)
		sec, _ := abi.ParseSection(ps.SectionName)
		t := &progTranslator{spec: spec, name: name, fn: ProgFunction(name), inline: true, endLabel: end, stackSym: stack, thread0: guarded, blockSlot: blockSlot, bt: sec.Bpftime, fused: fusedSet(fused[name])}
		if sharedSlot && (!entryGuarded || guarded) {
			// every thread running this block ran the entry block that set it
			t.bslotName = SharedSlotReg
		}
		if dfr != nil && t.bslotName != "" {
			t.dfr, t.dfrEntry = dfr, a == abi.KernelEntry
		}
		if err := t.translate(ps.Instructions); err != nil {
			return "", fmt.Errorf("program %q (inline): %w", name, err)
		}
		body := inlineRegRe.ReplaceAllString(t.out.String(), "%__gx${1}${2}")
		body = inlineLabelRe.ReplaceAllString(body, fmt.Sprintf("$$%s_p%d_pc${1}", pre, k))
		fmt.Fprintf(&b, "\t// program %s\n\t{\n", name)
		b.WriteString("\t.reg .b64 %__gxr<11>;\n\t.reg .b64 %__gxt<3>;\n\t.reg .b32 %__gxw<8>;\n\t.reg .pred %__gxp<4>;\n")
		if kn := programKernel(spec, name); kn != "" {
			// a kprobe/KERNEL program: only in that kernel (the id is a
			// literal at each site, so ptxas folds the test)
			fmt.Fprintf(&b, "\t// only in %s\n\tmov.b64 %%__gxr0, %s;\n\tsetp.ne.u64 %%__gxp0, %%__gxr0, %s;\n\t@%%__gxp0 bra %s;\n", kn, InlineKernelID, kernelIDLit(kn), end)
		}
		if useCtx {
			b.WriteString("\tmov.u64 %__gxr1, %__gxc2;\n")
		}
		fmt.Fprintf(&b, "\tmov.u64 %%__gxr10, %s;\n\tcvta.local.u64 %%__gxr10, %%__gxr10;\n\tadd.u64 %%__gxr10, %%__gxr10, %d;\n", stack, StackSize)
		b.WriteString(body)
		fmt.Fprintf(&b, "%s:\n\t}\n", end)
	}
	out := b.String()
	if dfr != nil && a == abi.KernelEntry {
		var decl, init strings.Builder
		for _, e := range dfr.order {
			fmt.Fprintf(&decl, ".reg .b64 %s;\n", dfr.acc[e])
			fmt.Fprintf(&init, "\tmov.u64 %s, 0;\n", dfr.acc[e])
		}
		out = strings.Replace(strings.Replace(out, deferDeclMark, decl.String(), 1), deferInitMark, init.String(), 1)
	}
	if dfr != nil && a == abi.KernelExit && len(dfr.order) > 0 {
		// what the exit's own adds did not take: one add per element
		// (none when the entry added nothing, e.g. launches outside block 0)
		flush, err := dfr.flush(spec, blockSlot)
		if err != nil {
			return "", err
		}
		out += flush
	}
	return out + "}\n", nil
}

// The entry's counts, deferred to the exit (inline form, both sites under
// the thread-0 guard, per-warp maps updated only atomically, which take the
// block's slot): an atomic add of the entry to an element known at the
// lookup (a constant key) becomes an add to a register of the kernel
// (%__gxd<site>_<n>, 0 at entry); the exit's own atomic add to the same
// element adds the register and clears it, and the exit block ends with an
// add of what is left, where it is not 0. So a block makes its atomics at
// its end only: launch-stats' entry time stays in a register, and the
// entry's red.adds (a block, a negative time stamp) ride with the exit's.
// Once a block has exited its counts are the same as without the
// deferral; until then none of them is in the map (nothing reads these
// maps on the device: atomicOnlyMaps). A block that leaves without the
// exit site (a trap, an exit inside a .func) loses its entry counts too.
type deferSet struct {
	order  []deferElem
	acc    map[deferElem]string
	merged map[deferElem]bool // the exit's add takes it on every path: no flush
}

type deferElem struct {
	mapName string
	key     uint32
}

const (
	deferDeclMark = "@GXDEFERDECL@\n"
	deferInitMark = "@GXDEFERINIT@\n"
)

func newDeferSet() *deferSet {
	return &deferSet{acc: map[deferElem]string{}, merged: map[deferElem]bool{}}
}

// reg: the register of element e; add allocates it (the entry).
func (d *deferSet) reg(e deferElem, add bool) string {
	if r, ok := d.acc[e]; ok || !add {
		return r
	}
	r := fmt.Sprintf("%%__gxd%s_%d", InlineSite, len(d.order))
	d.acc[e] = r
	d.order = append(d.order, e)
	return r
}

// flush: the exit block's last part, an add of each register not 0.
func (d *deferSet) flush(spec *ebpf.CollectionSpec, blockSlot map[string]bool) (string, error) {
	var b strings.Builder
	b.WriteString("\t// the entry's deferred counts\n\t{\n\t.reg .b64 %__gxr<2>;\n\t.reg .b64 %__gxt<2>;\n\t.reg .b32 %__gxw<3>;\n\t.reg .pred %__gxp<1>;\n")
	for _, e := range d.order {
		if d.merged[e] {
			continue
		}
		l, err := devmap.SpecLayout(spec.Maps[e.mapName])
		if err != nil {
			return "", err
		}
		t := &progTranslator{spec: spec, inline: true, thread0: true, blockSlot: blockSlot, bslotName: SharedSlotReg}
		t.emit("mov.u64 %%r1, %s", MapSymbol(e.mapName))
		t.emit("cvta.global.u64 %%r1, %%r1")
		t.emit("mov.u64 %%t0, %d", e.key)
		t.valueAddr(inlineKey{mapName: e.mapName, keyConst: true, keyVal: e.key}, l)
		t.emit("cvta.to.global.u64 %%t1, %%t0")
		t.emit("setp.ne.u64 %%p0, %s, 0", d.acc[e])
		t.emit("@%%p0 red.global.add.u64 [%%t1], %s", d.acc[e])
		b.WriteString(inlineRegRe.ReplaceAllString(t.out.String(), "%__gx${1}${2}"))
	}
	b.WriteString("\t}\n")
	return b.String(), nil
}

// readsCtx reports whether a program may read r1 as it was at entry (the
// context pointer). Conservative: it follows the straight-line prefix of
// the program and answers "no" only when r1 is overwritten (a write that
// does not read it, or a call of an argument-less helper, which clobbers
// r1-r5) or the program exits before any read; a jump, a call with
// arguments or anything that reads r1 first is "yes". When no program of
// an attach point reads it, the inline form builds no context: its two
// global loads and four local stores would run at every probe site.
func readsCtx(insns asm.Instructions) bool {
	const r1 = asm.R1
	for _, ins := range insns {
		op := ins.OpCode
		cls := op.Class()
		switch {
		case cls.IsJump():
			switch op.JumpOp() {
			case asm.Exit:
				return false
			case asm.Call:
				if ins.IsBuiltinCall() && pureHelper(ins.Constant) && helperArgs(ins.Constant) == 0 {
					return false
				}
			}
			return true
		case cls.IsALU():
			if op.Source() == asm.RegSource && ins.Src == r1 {
				return true
			}
			if ins.Dst == r1 {
				return op.ALUOp() != asm.Mov
			}
		case cls == asm.LdClass:
			if op.IsDWordLoad() && ins.Dst == r1 {
				return false
			}
			if !op.IsDWordLoad() {
				return true
			}
		case cls == asm.LdXClass:
			if ins.Src == r1 {
				return true
			}
			if ins.Dst == r1 {
				return false
			}
		case cls == asm.StClass:
			if ins.Dst == r1 {
				return true
			}
		case cls == asm.StXClass:
			if ins.Dst == r1 || ins.Src == r1 {
				return true
			}
		default:
			return true
		}
	}
	return false
}

// helperArgs: the arguments of a pure helper (pureHelper).
func helperArgs(id int64) int {
	switch id {
	case abi.HelperThreadIdx, abi.HelperBlockIdx, abi.HelperBlockDim, abi.HelperGridDim:
		return 1
	}
	return 0
}
