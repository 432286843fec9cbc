package verifier

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/devrt/probe"
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
	Attach   probe.Attach
	Insns    int      // raw instructions (an ld_imm64 counts twice)
	MaxStack int      // bytes of stack the program uses
	Helpers  []string // helpers called, sorted
	Maps     []string // maps referenced, sorted
	States   int      // instructions stepped through by the exploration, over all paths
	Loops    int      // back-edges the exploration took and proved bounded
}

// Report is the verdict on every device program of a collection.
type Report struct {
	Programs []*Result // sorted by name
	// Written: maps some program updates, deletes from, stores into or
	// changes atomically. A load from one of them is divergent.
	Written []string
}

// VerifyCollection checks every program of spec whose section is a device
// attach point (probe.AttachOfSection); others are not looked at. A map
// written by any device program counts as written for all of them: loads
// from it are divergent, since another warp may change it between the
// loads of two lanes.
func VerifyCollection(spec *ebpf.CollectionSpec) (*Report, error) {
	if spec == nil {
		return nil, errors.New("verify collection: nil spec")
	}
	var names []string
	for name, p := range spec.Programs {
		if _, ok := probe.AttachOfSection(p.SectionName); ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	written := map[string]bool{}
	for {
		rep := &Report{}
		grew := false
		for _, name := range names {
			p := spec.Programs[name]
			attach, _ := probe.AttachOfSection(p.SectionName)
			res, wrote, err := verifyProg(p, spec.Maps, attach, written)
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
func Verify(prog *ebpf.ProgramSpec, maps map[string]*ebpf.MapSpec, attach probe.Attach) (*Result, error) {
	if prog == nil {
		return nil, errors.New("verify: nil program")
	}
	written := map[string]bool{}
	for {
		res, wrote, err := verifyProg(prog, maps, attach, written)
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
	name string
	spec *ebpf.MapSpec
	typ  probe.MapType
}

type verifier struct {
	prog    string
	attach  probe.Attach
	g       *cfg
	src     []lineInfo
	specs   map[string]*ebpf.MapSpec
	maps    []*mapRef
	mapIdx  map[string]int
	written map[string]bool // assumed written (loads from them are divergent)
	wrote   map[string]bool // found written

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

func verifyProg(prog *ebpf.ProgramSpec, maps map[string]*ebpf.MapSpec, attach probe.Attach, written map[string]bool) (*Result, map[string]bool, error) {
	if attach != probe.KernelEntry && attach != probe.KernelExit {
		return nil, nil, fmt.Errorf("verify %s: %w: %v", prog.Name, ErrUnsupportedAttach, attach)
	}
	v := &verifier{
		prog:        prog.Name,
		attach:      attach,
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
	}
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
	st.ctrl, st.tidZero = r.ctrl, r.tidZero
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

// mapRef validates a referenced map (once) and returns its index.
func (v *verifier) mapRef(pc int, name string) (int, error) {
	if i, ok := v.mapIdx[name]; ok {
		return i, nil
	}
	spec := v.specs[name]
	if name == "" || spec == nil {
		return 0, v.errAt(pc, ErrMap, "reference to unknown map %q", name)
	}
	var t probe.MapType
	switch spec.Type {
	case ebpf.Array:
		t = probe.MapArray
	case ebpf.Hash:
		t = probe.MapHash
	case ebpf.PerCPUArray:
		t = probe.MapPerWarp
	case ebpf.RingBuf:
		t = probe.MapRingbuf
	default:
		return 0, v.errAt(pc, ErrMap, "map %q has type %v: device maps are Array, Hash, PerCPUArray or RingBuf", name, spec.Type)
	}
	if _, err := probe.Layout(t, spec.KeySize, spec.ValueSize, spec.MaxEntries); err != nil {
		return 0, v.errAt(pc, ErrMap, "map %q: %v", name, err)
	}
	if t != probe.MapRingbuf && spec.ValueSize == 0 {
		return 0, v.errAt(pc, ErrMap, "map %q: value size 0", name)
	}
	v.maps = append(v.maps, &mapRef{name: name, spec: spec, typ: t})
	v.mapIdx[name] = len(v.maps) - 1
	return len(v.maps) - 1, nil
}
