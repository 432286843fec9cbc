package verifier

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/gpubpf/abi"
)

// maxExplored is the budget of instructions the exploration may step
// through, over all paths of one program. Running out of it means a loop
// was not proven bounded (or the program has too many paths). A variable
// only so tests can lower it.
var maxExplored = 200_000

// maxCheckpoints caps the states kept per join point for pruning.
const maxCheckpoints = 64

// Result is what verifying one program found.
type Result struct {
	Prog     string
	Attach   abi.Attach
	Insns    int      // raw instructions (an ld_imm64 counts twice)
	MaxStack int      // bytes of stack the program uses
	Helpers  []string // helpers called, sorted
	Maps     []string // maps referenced, sorted
	States   int      // instructions stepped through by the exploration, over all paths
	Loops    int      // back-edges the exploration took and proved bounded
	// Kernel: the .entry a bpftime-style program is limited to (its
	// kprobe/KERNEL section); "" = every probed kernel.
	Kernel string
	// Bpftime: the program is bpftime-style (every thread is an event).
	Bpftime bool
	// FusedAdds: raw indices of the loads that begin a load, add, store of
	// one shared map value address: the translator turns each into one
	// atomic add (Options.FusedAdds), which the verifier relied on.
	FusedAdds []int
}

// ErrNoPrograms: a collection has no program at a device attach point;
// verifying it would check nothing.
var ErrNoPrograms = errors.New("no program at a device attach point (sections gpuext/kernel_entry, gpuext/kernel_exit, kprobe/KERNEL, kretprobe/KERNEL)")

// Report is the verdict on every device program of a collection.
type Report struct {
	Programs []*Result // sorted by name
	// Written: maps some program updates, deletes from, stores into or
	// changes atomically. A load from one of them is divergent.
	Written []string
}

// VerifyCollection checks every program of spec whose section is a device
// attach point (abi.AttachOfSection); others are not looked at. A map
// written by any device program counts as written for all of them: loads
// from it are divergent, since another warp may change it between the
// loads of two lanes.
func VerifyCollection(spec *ebpf.CollectionSpec) (*Report, error) {
	if spec == nil {
		return nil, errors.New("verify collection: nil spec")
	}
	var names []string
	var others []string
	for name, p := range spec.Programs {
		if _, ok := abi.AttachOfSection(p.SectionName); ok {
			names = append(names, name)
		} else {
			others = append(others, fmt.Sprintf("%s in %q", name, p.SectionName))
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		sort.Strings(others)
		if len(others) == 0 {
			return nil, fmt.Errorf("verify collection: %w; it has no programs", ErrNoPrograms)
		}
		return nil, fmt.Errorf("verify collection: %w; it has %s", ErrNoPrograms, strings.Join(others, ", "))
	}
	written := map[string]bool{}
	for {
		rep := &Report{}
		grew := false
		for _, name := range names {
			p := spec.Programs[name]
			sec, _ := abi.ParseSection(p.SectionName)
			res, wrote, err := verifyProg(p, spec.Maps, sec, written)
			if err != nil {
				return nil, err
			}
			grew = mergeWritten(written, wrote) || grew
			rep.Programs = append(rep.Programs, res)
		}
		if !grew {
			for m := range written {
				rep.Written = append(rep.Written, m)
			}
			sort.Strings(rep.Written)
			return rep, nil
		}
	}
}

// Verify checks one program against the maps it may reference. It returns
// an *Error (errors.As) when the program is rejected.
func Verify(prog *ebpf.ProgramSpec, maps map[string]*ebpf.MapSpec, attach abi.Attach) (*Result, error) {
	if prog == nil {
		return nil, errors.New("verify: nil program")
	}
	written := map[string]bool{}
	sec := abi.Section{Attach: attach}
	if s, ok := abi.ParseSection(prog.SectionName); ok && s.Attach == attach {
		sec = s
	}
	for {
		res, wrote, err := verifyProg(prog, maps, sec, written)
		if err != nil {
			return nil, err
		}
		if !mergeWritten(written, wrote) {
			return res, nil
		}
	}
}

// mergeWritten adds the maps a pass wrote to written; true if any was new
// (another pass is needed: a read of it may be a read of data a program
// wrote).
func mergeWritten(written, wrote map[string]bool) bool {
	grew := false
	for m := range wrote {
		if !written[m] {
			written[m] = true
			grew = true
		}
	}
	return grew
}

// mapRef is a map the program references.
type mapRef struct {
	name    string
	spec    *ebpf.MapSpec
	typ     abi.MapType
	perLane bool // a ring buffer every lane may write its own records to
}

type verifier struct {
	prog   string
	attach abi.Attach
	bt     bool // bpftime-style: every thread is an event
	// fusable: raw index of a store -> the load that begins a load, add,
	// store of one address (fusableAdds); fusedStore: those whose address
	// was a shared map value on a path (the translator fuses them);
	// unfused: those seen with another address.
	fusable    map[int]int
	fusedStore map[int]bool
	unfused    map[int]bool
	g          *cfg
	src        []lineInfo
	specs      map[string]*ebpf.MapSpec
	maps       []*mapRef
	mapIdx     map[string]int
	written    map[string]bool // assumed written (loads from them are divergent)
	wrote      map[string]bool // found written

	explored  int
	maxStack  int
	helpers   map[string]bool
	backEdges map[int]int // jump insn -> times taken
	nextID    uint32

	work        []*state
	checkpoints map[int][]*checkpoint
	open        []*checkpoint
}

type checkpoint struct {
	st   *state
	wl   int // worklist length when it was made
	done bool
}

type lineInfo struct {
	file string
	line uint32
	text string
}

type btfLine interface {
	FileName() string
	LineNumber() uint32
	Line() string
}

func verifyProg(prog *ebpf.ProgramSpec, maps map[string]*ebpf.MapSpec, sec abi.Section, written map[string]bool) (*Result, map[string]bool, error) {
	attach := sec.Attach
	if attach != abi.KernelEntry && attach != abi.KernelExit {
		return nil, nil, fmt.Errorf("verify %s: %w: %v", prog.Name, ErrUnsupportedAttach, attach)
	}
	v := &verifier{
		prog:        prog.Name,
		attach:      attach,
		bt:          sec.Bpftime,
		fusedStore:  map[int]bool{},
		unfused:     map[int]bool{},
		specs:       maps,
		mapIdx:      map[string]int{},
		written:     written,
		wrote:       map[string]bool{},
		helpers:     map[string]bool{},
		backEdges:   map[int]int{},
		checkpoints: map[int][]*checkpoint{},
	}
	// Line info: each insn takes the line of the nearest insn at or before
	// it that has one (BTF line info marks where a line starts).
	var cur lineInfo
	for i := range prog.Instructions {
		ins := &prog.Instructions[i]
		if l, ok := ins.Source().(btfLine); ok && l.LineNumber() != 0 {
			cur = lineInfo{filepath.Base(l.FileName()), l.LineNumber(), strings.TrimSpace(l.Line())}
		}
		for range width(ins) {
			v.src = append(v.src, cur)
		}
	}
	g, cerr := buildCFG(prog.Instructions)
	if cerr != nil {
		kind := cerr.kind
		if kind == nil {
			kind = ErrProgram
		}
		return nil, nil, v.errAt(cerr.pc, kind, "%s", cerr.msg)
	}
	v.g = g
	if v.bt {
		v.fusable = fusableAdds(prog.Instructions, g)
	}
	if err := v.run(); err != nil {
		return nil, nil, err
	}
	res := &Result{
		Prog:     prog.Name,
		Attach:   attach,
		Insns:    g.n,
		MaxStack: v.maxStack,
		States:   v.explored,
		Loops:    len(v.backEdges),
		Kernel:   sec.Kernel,
		Bpftime:  sec.Bpftime,
	}
	for stpc := range v.fusedStore {
		if v.unfused[stpc] {
			return nil, nil, v.errAt(stpc, ErrDivergent, "the add at insns %d-%d is into a shared map value on one path and into other memory on another: it cannot be made one atomic add", v.fusable[stpc], stpc)
		}
		res.FusedAdds = append(res.FusedAdds, v.fusable[stpc])
	}
	sort.Ints(res.FusedAdds)
	for h := range v.helpers {
		res.Helpers = append(res.Helpers, h)
	}
	sort.Strings(res.Helpers)
	for _, m := range v.maps {
		res.Maps = append(res.Maps, m.name)
	}
	sort.Strings(res.Maps)
	return res, v.wrote, nil
}

func (v *verifier) errAt(pc int, kind error, format string, args ...any) *Error {
	e := &Error{Prog: v.prog, Insn: pc, Msg: fmt.Sprintf(format, args...), Kind: kind}
	if pc >= 0 && pc < len(v.src) && v.src[pc].line != 0 {
		e.Source = fmt.Sprintf("%s:%d", v.src[pc].file, v.src[pc].line)
		e.Line = v.src[pc].text
	}
	return e
}

// run explores every path from insn 0, depth first.
func (v *verifier) run() error {
	st := &state{pc: 0, prev: -1}
	st.r[asm.R1] = reg{k: kCtx}
	st.r[asm.R10] = reg{k: kStack}
	v.work = []*state{st}
	for len(v.work) > 0 {
		st := v.work[len(v.work)-1]
		v.work = v.work[:len(v.work)-1]
		for len(v.open) > 0 && v.open[len(v.open)-1].wl > len(v.work) {
			v.open[len(v.open)-1].done = true
			v.open = v.open[:len(v.open)-1]
		}
		for {
			if v.explored >= maxExplored {
				return v.budgetError(st.pc)
			}
			v.explored++
			// Lanes that split at a divergent branch meet again here.
			for n := len(st.regions); n > 0 && st.regions[n-1].reconv == st.pc; n = len(st.regions) {
				v.reconverge(st, st.regions[n-1])
				st.regions = st.regions[:n-1]
			}
			if v.g.target[st.pc] {
				prune, err := v.checkpoint(st)
				if err != nil {
					return err
				}
				if prune {
					break
				}
			}
			done, err := v.step(st)
			if err != nil {
				return err
			}
			if done {
				break
			}
		}
	}
	return nil
}

func (v *verifier) budgetError(pc int) error {
	best, n := -1, 0
	for j, c := range v.backEdges {
		if c > n || (c == n && j < best) {
			best, n = j, c
		}
	}
	if best < 0 {
		return v.errAt(pc, ErrUnboundedLoop, "program too complex: explored %d insns without covering every path", v.explored)
	}
	return v.errAt(best, ErrUnboundedLoop, "unbounded loop: back-edge to insn %d not proven bounded (explored %d insns)",
		jumpTarget(best, v.g.ins[best]), v.explored)
}

// checkpoint prunes st when a finished path from the same insn covers it,
// and rejects it when a path still being explored (so: one st descends
// from, around a loop) is the same state: the loop can repeat it forever.
// A state that an unfinished path only covers is explored on (a counter
// counting down from an unknown value in [0, 255] is covered by the state
// before it, yet the loop ends); a loop that never repeats a state but
// never ends runs into the exploration budget.
func (v *verifier) checkpoint(st *state) (bool, error) {
	cps := v.checkpoints[st.pc]
	live := v.g.live[st.pc]
	for _, cp := range cps {
		if !covers(cp.st, st, live) {
			continue
		}
		if cp.done {
			return true, nil
		}
		if !covers(st, cp.st, live) {
			continue // narrower than the state around the loop: not a repeat
		}
		at := st.prev
		if at < 0 || v.g.ins[at] == nil || !v.g.ins[at].OpCode.Class().IsJump() {
			at = st.pc
		}
		return false, v.errAt(at, ErrUnboundedLoop, "unbounded loop: back-edge to insn %d not proven bounded (the loop can repeat a state)", st.pc)
	}
	for i, cp := range cps {
		if !cp.done {
			continue
		}
		if j, ok := join(cp.st, st, live); ok {
			j.pc, j.prev = st.pc, st.prev
			*st = *j
			// The joined state covers the finished one: it takes its place.
			cps = append(cps[:i:i], cps[i+1:]...)
			v.checkpoints[st.pc] = cps
			break
		}
	}
	if len(cps) < maxCheckpoints {
		cp := &checkpoint{st: st.clone(), wl: len(v.work)}
		v.checkpoints[st.pc] = append(cps, cp)
		v.open = append(v.open, cp)
	}
	return false, nil
}

// reconverge ends a divergent region: control goes back to what it was
// before the branch, and whatever the region may have written differs
// between the lanes that ran it and those that did not.
func (v *verifier) reconverge(st *state, r region) {
	st.ctrl, st.tidZero, st.oneThread = r.ctrl, r.tidZero, r.oneThread
	w := v.g.writeSetOf(r.branch)
	for i := range st.r {
		if w.regs&(1<<i) != 0 && st.r[i].k != kNone {
			st.r[i].div, st.r[i].tag = true, tagNone
		}
	}
	for i := range st.stk {
		if w.indirect || w.slots&(1<<i) != 0 {
			st.stk[i].div = true
			st.stk[i].r.div, st.stk[i].r.tag = true, tagNone
		}
	}
}

func (v *verifier) read(st *state, pc int, r asm.Register) (reg, error) {
	if r > asm.R10 {
		return reg{}, v.errAt(pc, ErrProgram, "invalid register r%d", r)
	}
	if st.r[r].k == kNone {
		return reg{}, v.errAt(pc, ErrMemory, "r%d is read before it is written (uninitialised register)", r)
	}
	return st.r[r], nil
}

func (v *verifier) write(st *state, pc int, r asm.Register, val reg) error {
	if r >= asm.R10 {
		return v.errAt(pc, ErrProgram, "r%d is read-only (the frame pointer)", r)
	}
	if st.ctrl != cUniform {
		val.div = true
	}
	st.r[r] = val
	return nil
}

// step runs the insn at st.pc. done: the path ended (exit, or impossible).
// A second successor is pushed on the worklist.
func (v *verifier) step(st *state) (bool, error) {
	pc := st.pc
	ins := v.g.ins[pc]
	next := pc + width(ins)
	var err error
	switch cls := ins.OpCode.Class(); {
	case cls.IsALU():
		err = v.alu(st, pc, ins)
	case cls == asm.LdClass:
		err = v.ldImm(st, pc, ins)
	case cls == asm.LdXClass:
		err = v.load(st, pc, ins)
	case cls.IsStore():
		err = v.store(st, pc, ins)
	case cls.IsJump():
		switch ins.OpCode.JumpOp() {
		case asm.Exit:
			r0 := st.r[asm.R0]
			if r0.k == kNone {
				return true, v.errAt(pc, ErrMemory, "r0 is not set at exit")
			}
			if r0.k != kScalar {
				return true, v.errAt(pc, ErrMemory, "r0 is a %s at exit: returning a pointer leaks it", r0.k)
			}
			return true, nil
		case asm.Call:
			err = v.call(st, pc, ins)
		default:
			return v.jump(st, pc, ins)
		}
	default:
		err = v.errAt(pc, ErrProgram, "unsupported instruction %v", ins)
	}
	if err != nil {
		return true, err
	}
	st.prev, st.pc = pc, next
	return false, nil
}

func (v *verifier) ldImm(st *state, pc int, ins *asm.Instruction) error {
	if !ins.OpCode.IsDWordLoad() {
		return v.errAt(pc, ErrProgram, "legacy packet access (%v) is not supported", ins.OpCode)
	}
	switch ins.Src {
	case asm.R0:
		return v.write(st, pc, ins.Dst, scalarReg(sconst(uint64(ins.Constant)), false))
	case asm.PseudoMapFD:
		name := ins.Reference()
		m, err := v.mapRef(pc, name)
		if err != nil {
			return err
		}
		return v.write(st, pc, ins.Dst, reg{k: kMapPtr, m: m})
	case asm.PseudoMapValue:
		// A global variable: a direct pointer into the value of a
		// single-entry array (.bss, .data, .rodata).
		name := ins.Reference()
		m, err := v.mapRef(pc, name)
		if err != nil {
			return err
		}
		spec := v.maps[m].spec
		off := int64(uint32(uint64(ins.Constant) >> 32))
		if spec.Type != ebpf.Array || spec.MaxEntries != 1 {
			return v.errAt(pc, ErrMap, "direct value access to map %q: only single-entry arrays (globals) have one", name)
		}
		if off >= int64(spec.ValueSize) {
			return v.errAt(pc, ErrMemory, "direct value access to map %q at offset %d: beyond its %d-byte value", name, off, spec.ValueSize)
		}
		return v.write(st, pc, ins.Dst, reg{k: kMapValue, m: m, off: off})
	}
	return v.errAt(pc, ErrProgram, "unsupported ld_imm64 source %v", ins.Src)
}

// fusableAdds finds, by shape, the load, add, store triples of one address
// (ldx rL = [rP+off]; then rL += x (x a register other than rL, or an
// immediate) and stx [rP+off] = rL, or rR += rL and stx [rP+off] = rR;
// same size, 4 or 8 bytes; nothing jumps into the middle): store index ->
// load index. Whether the address is a shared map value is for the
// exploration.
func fusableAdds(insns asm.Instructions, g *cfg) map[int]int {
	out := map[int]int{}
	raw := 0
	var at []int
	for i := range insns {
		at = append(at, raw)
		raw += width(&insns[i])
	}
	for i := 0; i+2 < len(insns); i++ {
		ld, add, st := insns[i], insns[i+1], insns[i+2]
		if _, _, ok := FusedShape(ld, add, st); ok && !g.target[at[i+1]] && !g.target[at[i+2]] {
			out[at[i+2]] = at[i]
		}
	}
	return out
}

// FusedShape reports whether ld, add, st are a load, add, store of one
// address that one atomic add can replace, and which registers: loaded is
// the load's destination (it ends up holding the old value), result the
// add's (it ends up holding old + addend); they are the same register
// when the addend is add's source.
func FusedShape(ld, add, st asm.Instruction) (loaded, result asm.Register, ok bool) {
	if ld.OpCode.Class() != asm.LdXClass || ld.OpCode.Mode() != asm.MemMode {
		return 0, 0, false
	}
	size := ld.OpCode.Size()
	if size != asm.Word && size != asm.DWord {
		return 0, 0, false
	}
	rL, rP := ld.Dst, ld.Src
	if rL == rP || !add.OpCode.Class().IsALU() || add.OpCode.ALUOp() != asm.Add || add.Dst == rP || add.Dst == asm.R10 {
		return 0, 0, false
	}
	regSrc := add.OpCode.Source() == asm.RegSource
	switch {
	case add.Dst == rL && (!regSrc || add.Src != rL && add.Src != asm.R10):
	case add.Dst != rL && regSrc && add.Src == rL:
	default:
		return 0, 0, false
	}
	if st.OpCode.Class() != asm.StXClass || st.OpCode.Mode() != asm.MemMode || st.OpCode.Size() != size ||
		st.Dst != rP || st.Src != add.Dst || st.Offset != ld.Offset {
		return 0, 0, false
	}
	return rL, add.Dst, true
}

// mapRef validates a referenced map (once) and returns its index.
func (v *verifier) mapRef(pc int, name string) (int, error) {
	if i, ok := v.mapIdx[name]; ok {
		return i, nil
	}
	spec := v.specs[name]
	if name == "" || spec == nil {
		return 0, v.errAt(pc, ErrMap, "reference to unknown map %q", name)
	}
	switch spec.Type {
	case ebpf.Array, ebpf.Hash, ebpf.PerCPUArray, ebpf.RingBuf, abi.MapTypePerThread:
	default:
		if !v.bt {
			return 0, v.errAt(pc, ErrMap, "map %q has type %v: device maps are Array, Hash, PerCPUArray or RingBuf, or the per-thread array (%d); bpftime's GPU map types are for kprobe/KERNEL programs", name, spec.Type, abi.MapTypePerThread)
		}
	}
	_, dm, err := abi.KernelMapLayout(uint32(spec.Type), spec.KeySize, spec.ValueSize, spec.MaxEntries, spec.MapExtra)
	if err != nil {
		return 0, v.errAt(pc, ErrMap, "map %q (type %d): %v", name, uint32(spec.Type), err)
	}
	t := dm.Type
	if t != abi.MapRingbuf && spec.ValueSize == 0 {
		return 0, v.errAt(pc, ErrMap, "map %q: value size 0", name)
	}
	v.maps = append(v.maps, &mapRef{name: name, spec: spec, typ: t, perLane: dm.PerLane})
	v.mapIdx[name] = len(v.maps) - 1
	return len(v.maps) - 1, nil
}

// VerifyEach checks every device program of spec on its own and returns
// each one's result or rejection, by program name: what an operator wants
// of an object from elsewhere (how many of its programs run, and why the
// others do not). Maps written by any accepted program count as written
// for all, as in VerifyCollection. ErrNoPrograms when there is none.
func VerifyEach(spec *ebpf.CollectionSpec) (map[string]*Result, map[string]error, error) {
	if spec == nil {
		return nil, nil, errors.New("verify each: nil spec")
	}
	written := map[string]bool{}
	for {
		results, errs := map[string]*Result{}, map[string]error{}
		grew := false
		for name, p := range spec.Programs {
			sec, ok := abi.ParseSection(p.SectionName)
			if !ok {
				continue
			}
			res, wrote, err := verifyProg(p, spec.Maps, sec, written)
			if err != nil {
				errs[name] = err
				continue
			}
			results[name] = res
			grew = mergeWritten(written, wrote) || grew
		}
		if len(results)+len(errs) == 0 {
			return nil, nil, fmt.Errorf("verify each: %w", ErrNoPrograms)
		}
		if !grew {
			return results, errs, nil
		}
	}
}
