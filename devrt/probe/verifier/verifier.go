package verifier

import (
	"errors"
	"fmt"
	"math"
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
			for m := range wrote {
				if !written[m] {
					written[m] = true
					grew = true
				}
			}
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
		grew := false
		for m := range wrote {
			if !written[m] {
				written[m] = true
				grew = true
			}
		}
		if !grew {
			return res, nil
		}
	}
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
// from, around a loop) covers it: the loop can repeat that state forever.
func (v *verifier) checkpoint(st *state) (bool, error) {
	cps := v.checkpoints[st.pc]
	for _, cp := range cps {
		if !covers(cp.st, st, v.g.live[st.pc]) {
			continue
		}
		if cp.done {
			return true, nil
		}
		at := st.prev
		if at < 0 || v.g.ins[at] == nil || !v.g.ins[at].OpCode.Class().IsJump() {
			at = st.pc
		}
		return false, v.errAt(at, ErrUnboundedLoop, "unbounded loop: back-edge to insn %d not proven bounded (the loop can repeat a state)", st.pc)
	}
	live := v.g.live[st.pc]
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

func (v *verifier) alu(st *state, pc int, ins *asm.Instruction) error {
	is64 := ins.OpCode.Class() == asm.ALU64Class
	op := ins.OpCode.ALUOp()
	if ins.Dst == asm.R10 {
		return v.errAt(pc, ErrProgram, "r10 is read-only (the frame pointer)")
	}
	if op == asm.Swap {
		d, err := v.read(st, pc, ins.Dst)
		if err != nil {
			return err
		}
		if d.k != kScalar {
			return v.errAt(pc, ErrMemory, "byte swap of a %s", d.k)
		}
		size := uint(ins.Constant)
		if size != 16 && size != 32 && size != 64 {
			return v.errAt(pc, ErrProgram, "byte swap of %d bits", size)
		}
		r := d.s
		if is64 || ins.OpCode.Endianness() != asm.LE { // bswap, or to big endian
			r = sunknown()
		}
		if size < 64 {
			r = alu64(asm.And, r, sconst(1<<size-1))
		}
		return v.write(st, pc, ins.Dst, scalarReg(r, d.div))
	}
	var src reg
	if ins.OpCode.Source() == asm.RegSource {
		var err error
		if src, err = v.read(st, pc, ins.Src); err != nil {
			return err
		}
	} else {
		c := uint64(ins.Constant)
		if !is64 {
			c = uint64(uint32(ins.Constant))
		}
		src = scalarReg(sconst(c), false)
	}
	switch op {
	case asm.Mov:
		if is64 {
			if src.k == kScalar && ins.OpCode.Source() == asm.RegSource {
				if src.id == 0 {
					v.nextID++
					src.id = v.nextID
					st.r[ins.Src].id = src.id
				}
			}
			return v.write(st, pc, ins.Dst, src)
		}
		if src.k != kScalar {
			return v.errAt(pc, ErrMemory, "32-bit move of a %s", src.k)
		}
		r := reg{k: kScalar, s: trunc32(src.s), div: src.div}
		if src.tag != tagNone && !src.shifted && src.s.umax <= math.MaxUint32 {
			r.tag = src.tag
		}
		return v.write(st, pc, ins.Dst, r)
	case asm.MovSX8, asm.MovSX16, asm.MovSX32:
		if src.k != kScalar {
			return v.errAt(pc, ErrMemory, "sign-extending move of a %s", src.k)
		}
		r := sunknown()
		if !is64 {
			r = urange(0, math.MaxUint32)
		}
		return v.write(st, pc, ins.Dst, scalarReg(r, src.div))
	}
	d, err := v.read(st, pc, ins.Dst)
	if err != nil {
		return err
	}
	if d.k.isPtr() || src.k.isPtr() {
		return v.ptrArith(st, pc, ins, op, is64, d, src)
	}
	switch op {
	case asm.Add, asm.Sub, asm.Mul, asm.Div, asm.Mod, asm.Or, asm.And, asm.Xor, asm.Neg:
	case asm.LSh, asm.RSh, asm.ArSh:
		lim := uint64(64)
		if !is64 {
			lim = 32
		}
		if src.s.isConst() && src.s.t.v >= lim {
			return v.errAt(pc, ErrProgram, "shift by %d: out of range for a %d-bit value", src.s.t.v, lim)
		}
	case asm.SDiv, asm.SMod:
		r := sunknown()
		if !is64 {
			r = urange(0, math.MaxUint32)
		}
		return v.write(st, pc, ins.Dst, scalarReg(r, d.div || src.div))
	default:
		return v.errAt(pc, ErrProgram, "unsupported ALU op %v", op)
	}
	var s scalar
	if is64 {
		s = alu64(op, d.s, src.s)
	} else {
		s = alu32(op, d.s, src.s)
	}
	r := scalarReg(s, d.div || src.div)
	// A leader value survives clang's zero-extension of a u32 (<<32 then
	// >>32, or & 0xffffffff): the value is unchanged.
	if d.tag != tagNone && is64 && src.s.isConst() {
		c := src.s.t.v
		switch {
		case op == asm.LSh && c == 32 && !d.shifted && d.s.umax <= math.MaxUint32:
			r.tag, r.shifted = d.tag, true
		case op == asm.RSh && c == 32 && d.shifted:
			r.tag = d.tag
		case op == asm.And && !d.shifted && c&(c+1) == 0 && d.s.umax <= c:
			r.tag = d.tag
		}
	}
	return v.write(st, pc, ins.Dst, r)
}

// ptrArith allows pointer +/- scalar only: constant offsets on every
// pointer but a map pointer, bounded variable ones on map values (checked
// at the access).
func (v *verifier) ptrArith(st *state, pc int, ins *asm.Instruction, op asm.ALUOp, is64 bool, d, src reg) error {
	if !is64 {
		return v.errAt(pc, ErrMemory, "32-bit arithmetic on a pointer")
	}
	p, sc := d, src
	switch {
	case op == asm.Add && d.k.isPtr() && src.k.isPtr():
		return v.errAt(pc, ErrMemory, "adding two pointers")
	case op == asm.Add && src.k.isPtr():
		p, sc = src, d
	case op == asm.Sub && d.k.isPtr() && src.k.isPtr():
		return v.errAt(pc, ErrMemory, "subtracting pointers is not allowed")
	case op == asm.Sub && src.k.isPtr():
		return v.errAt(pc, ErrMemory, "subtracting a pointer from a scalar")
	case op != asm.Add && op != asm.Sub:
		return v.errAt(pc, ErrMemory, "%v on a %s: only pointer +/- scalar is allowed", op, p.k)
	}
	switch p.k {
	case kMapPtr:
		return v.errAt(pc, ErrMemory, "arithmetic on map pointer %q: a map pointer is only a helper argument", v.maps[p.m].name)
	case kMapValueOrNull:
		return v.errAt(pc, ErrMemory, "arithmetic on a map value pointer before its null check")
	}
	if sc.s.isConst() {
		c := int64(sc.s.t.v)
		if op == asm.Sub {
			c = -c
		}
		off := p.off + c
		if c > 1<<30 || c < -(1<<30) || off > 1<<30 || off < -(1<<30) {
			return v.errAt(pc, ErrMemory, "pointer offset %d out of range", c)
		}
		p.off = off
	} else {
		if p.k != kMapValue {
			return v.errAt(pc, ErrMemory, "variable offset added to a %s: only constant offsets are allowed there", p.k)
		}
		p.s = alu64(op, p.s, sc.s)
	}
	p.div = p.div || sc.div
	p.id = 0
	p.tag = tagNone
	return v.write(st, pc, ins.Dst, p)
}

// ctxFields: offset -> size of struct gpuext_probe_ctx's fields.
var ctxFields = []struct{ off, size int64 }{{0, 8}, {8, 4}, {12, 4}, {16, 8}}

func (v *verifier) load(st *state, pc int, ins *asm.Instruction) error {
	mode := ins.OpCode.Mode()
	if mode != asm.MemMode && mode != asm.MemSXMode {
		return v.errAt(pc, ErrProgram, "unsupported load mode %v", mode)
	}
	size := ins.OpCode.Size().Sizeof()
	base, err := v.read(st, pc, ins.Src)
	if err != nil {
		return err
	}
	var out reg
	switch base.k {
	case kStack:
		out, err = v.readStack(st, pc, base.off+int64(ins.Offset), size)
		if err != nil {
			return err
		}
	case kCtx:
		off := base.off + int64(ins.Offset)
		ok := false
		for _, f := range ctxFields {
			if off >= f.off && off+int64(size) <= f.off+f.size && off%int64(size) == 0 {
				ok = true
			}
		}
		if !ok {
			return v.errAt(pc, ErrMemory, "ctx read of %d bytes at offset %d: not a field of struct gpuext_probe_ctx (%d bytes)", size, off, probe.CtxSize)
		}
		out = scalarReg(sizeRange(size), base.div)
	case kMapValue:
		if err := v.mapAccess(pc, base, ins.Offset, size); err != nil {
			return err
		}
		name := v.maps[base.m].name
		out = scalarReg(sizeRange(size), base.div || v.written[name])
	default:
		return v.derefError(pc, base, "read")
	}
	if mode == asm.MemSXMode {
		out.s, out.id, out.tag = sunknown(), 0, tagNone
	}
	return v.write(st, pc, ins.Dst, out)
}

func sizeRange(size int) scalar {
	if size >= 8 {
		return sunknown()
	}
	return urange(0, 1<<(8*size)-1)
}

func (v *verifier) derefError(pc int, base reg, what string) error {
	switch base.k {
	case kMapValueOrNull:
		return v.errAt(pc, ErrMemory, "%s through a map value pointer that may be null: check the map_lookup_elem result against 0 first", what)
	case kMapPtr:
		return v.errAt(pc, ErrMemory, "%s through map pointer %q: a map pointer is only a helper argument", what, v.maps[base.m].name)
	case kCtx:
		return v.errAt(pc, ErrMemory, "write to ctx: the probe context is read-only")
	}
	return v.errAt(pc, ErrMemory, "%s through a %s (not a pointer)", what, base.k)
}

// mapAccess checks size bytes at base+off inside the map value, aligned.
func (v *verifier) mapAccess(pc int, base reg, off int16, size int) error {
	m := v.maps[base.m]
	vs := int64(m.spec.ValueSize)
	if base.s.smin < -(1<<30) || base.s.smax > 1<<30 {
		return v.errAt(pc, ErrMemory, "map %q value accessed at an unbounded offset: bound the index first (e.g. if (i >= N) return)", m.name)
	}
	fixed := base.off + int64(off)
	lo, hi := fixed+base.s.smin, fixed+base.s.smax+int64(size)
	if lo < 0 || hi > vs {
		return v.errAt(pc, ErrMemory, "map %q value access out of bounds: bytes [%d, %d) of a %d-byte value", m.name, lo, hi, vs)
	}
	if fixed%int64(size) != 0 || (base.s.t.v|base.s.t.m)&uint64(size-1) != 0 {
		return v.errAt(pc, ErrMemory, "misaligned %d-byte access to map %q value at offset %d: the GPU faults on it", size, m.name, lo)
	}
	return nil
}

func (v *verifier) stackBounds(pc int, off int64, size int) error {
	if off < -stackSize || off+int64(size) > 0 {
		return v.errAt(pc, ErrStack, "stack access at fp%+d (%d bytes) outside [-512, 0): a probe has 512 bytes of stack", off, size)
	}
	if off%int64(size) != 0 {
		return v.errAt(pc, ErrStack, "misaligned %d-byte stack access at fp%+d", size, off)
	}
	v.maxStack = max(v.maxStack, int(-off))
	return nil
}

func (v *verifier) readStack(st *state, pc int, off int64, size int) (reg, error) {
	if err := v.stackBounds(pc, off, size); err != nil {
		return reg{}, err
	}
	i, b := (off+stackSize)/8, (off+stackSize)%8
	sl := st.stk[i]
	mask := uint8((1<<size - 1) << b)
	if sl.init&mask != mask {
		return reg{}, v.errAt(pc, ErrStack, "read of uninitialised stack at fp%+d (%d bytes)", off, size)
	}
	if sl.spill {
		if size == 8 {
			return sl.r, nil
		}
		if sl.r.k != kScalar {
			return reg{}, v.errAt(pc, ErrMemory, "partial read of a spilled %s", sl.r.k)
		}
		if sl.r.s.isConst() {
			return scalarReg(sconst(sl.r.s.t.v>>(8*b)&(1<<(8*size)-1)), sl.r.div), nil
		}
		return scalarReg(sizeRange(size), sl.r.div), nil
	}
	return scalarReg(sizeRange(size), sl.div), nil
}

func (v *verifier) writeStack(st *state, pc int, off int64, size int, val reg) error {
	if err := v.stackBounds(pc, off, size); err != nil {
		return err
	}
	if st.ctrl != cUniform {
		val.div = true
	}
	i, b := (off+stackSize)/8, (off+stackSize)%8
	if size == 8 {
		st.stk[i] = slot{spill: true, r: val, init: 0xff}
		return nil
	}
	if val.k.isPtr() {
		return v.errAt(pc, ErrMemory, "%d-byte store of a %s to the stack: pointers are spilled whole", size, val.k)
	}
	sl := &st.stk[i]
	if sl.spill {
		if sl.r.k == kScalar {
			*sl = slot{init: 0xff, div: sl.r.div}
		} else {
			*sl = slot{} // the rest of a pointer is not readable
		}
	}
	sl.init |= uint8((1<<size - 1) << b)
	sl.div = sl.div || val.div
	return nil
}

// stackRange checks that [off, off+n) is stack written before; div: some
// byte of it may differ between lanes.
func (v *verifier) stackRange(st *state, pc int, off int64, n int64, what string) (bool, error) {
	if off < -stackSize || off+n > 0 || n <= 0 {
		return false, v.errAt(pc, ErrStack, "%s: %d bytes at fp%+d outside [-512, 0)", what, n, off)
	}
	v.maxStack = max(v.maxStack, int(-off))
	div := false
	for a := off; a < off+n; a++ {
		i, b := (a+stackSize)/8, (a+stackSize)%8
		sl := st.stk[i]
		if sl.init&(1<<b) == 0 {
			return false, v.errAt(pc, ErrStack, "%s: read of uninitialised stack at fp%+d", what, a)
		}
		if sl.spill && sl.r.k.isPtr() {
			return false, v.errAt(pc, ErrMemory, "pointer leak: %s holds a spilled %s at fp%+d", what, sl.r.k, a)
		}
		div = div || sl.div || (sl.spill && sl.r.div)
	}
	return div, nil
}

func (v *verifier) store(st *state, pc int, ins *asm.Instruction) error {
	mode := ins.OpCode.Mode()
	size := ins.OpCode.Size().Sizeof()
	base, err := v.read(st, pc, ins.Dst)
	if err != nil {
		return err
	}
	var val reg
	if ins.OpCode.Class() == asm.StXClass {
		if val, err = v.read(st, pc, ins.Src); err != nil {
			return err
		}
	} else {
		val = scalarReg(sconst(uint64(ins.Constant)), false)
	}
	if mode == asm.AtomicMode {
		return v.atomic(st, pc, ins, base, val, size)
	}
	if mode != asm.MemMode {
		return v.errAt(pc, ErrProgram, "unsupported store mode %v", mode)
	}
	switch base.k {
	case kStack:
		return v.writeStack(st, pc, base.off+int64(ins.Offset), size, val)
	case kMapValue:
		name := v.maps[base.m].name
		if err := v.writable(pc, base); err != nil {
			return err
		}
		if val.k.isPtr() {
			return v.errAt(pc, ErrMemory, "pointer leak: storing a %s into map %q", val.k, name)
		}
		if err := v.mapAccess(pc, base, ins.Offset, size); err != nil {
			return err
		}
		v.wrote[name] = true
		return v.idempotent(st, pc, fmt.Sprintf("store into map %q", name), base.div || val.div)
	}
	return v.derefError(pc, base, "write")
}

var atomicNames = map[asm.AtomicOp]string{
	asm.AddAtomic: "add", asm.FetchAdd: "add",
	asm.AndAtomic: "and", asm.FetchAnd: "and",
	asm.OrAtomic: "or", asm.FetchOr: "or",
	asm.XorAtomic: "xor", asm.FetchXor: "xor",
	asm.Xchg: "exchange", asm.CmpXchg: "compare-exchange",
}

func (v *verifier) atomic(st *state, pc int, ins *asm.Instruction, base, val reg, size int) error {
	aop := ins.OpCode.AtomicOp()
	name, ok := atomicNames[aop]
	if !ok || (size != 4 && size != 8) {
		return v.errAt(pc, ErrProgram, "unsupported atomic %v of %d bytes", aop, size)
	}
	if base.k != kMapValue {
		if base.k == kStack {
			return v.errAt(pc, ErrMemory, "atomic %s on the stack: atomics are for map values", name)
		}
		return v.derefError(pc, base, "atomic "+name)
	}
	m := v.maps[base.m].name
	if err := v.writable(pc, base); err != nil {
		return err
	}
	if val.k.isPtr() {
		return v.errAt(pc, ErrMemory, "pointer leak: atomic %s of a %s into map %q", name, val.k, m)
	}
	if err := v.mapAccess(pc, base, ins.Offset, size); err != nil {
		return err
	}
	v.wrote[m] = true
	if st.ctrl != cLeader {
		return v.errAt(pc, ErrDivergent, "atomic %s on map %q by every lane: it would apply once per thread; guard it with gpuext_lane_id() == 0 or aggregate", name, m)
	}
	fetched := scalarReg(sizeRange(size), true)
	switch aop {
	case asm.CmpXchg:
		r0, err := v.read(st, pc, asm.R0)
		if err != nil {
			return err
		}
		if r0.k != kScalar {
			return v.errAt(pc, ErrMemory, "compare-exchange against a %s", r0.k)
		}
		return v.write(st, pc, asm.R0, fetched)
	case asm.FetchAdd, asm.FetchAnd, asm.FetchOr, asm.FetchXor, asm.Xchg:
		return v.write(st, pc, ins.Src, fetched)
	}
	return nil
}

// rdonlyProg is BPF_F_RDONLY_PROG: the program may not write the map
// (clang's .rodata).
const rdonlyProg = 1 << 7

// writable rejects writes into a read-only map (const globals).
func (v *verifier) writable(pc int, base reg) error {
	m := v.maps[base.m]
	if m.spec.Flags&rdonlyProg != 0 || strings.HasPrefix(m.name, ".rodata") {
		return v.errAt(pc, ErrMemory, "write to read-only map %q", m.name)
	}
	return nil
}

// idempotent allows a side effect that every lane may repeat harmlessly:
// under a leader guard, or warp-uniform (uniform control, uniform operands).
func (v *verifier) idempotent(st *state, pc int, what string, divOperands bool) error {
	switch {
	case st.ctrl == cLeader:
		return nil
	case st.ctrl == cDivergent:
		return v.errAt(pc, ErrDivergent, "%s under divergent control (branch at insn %d): only some lanes run it; guard it with gpuext_lane_id() == 0 or branch on warp-uniform values", what, st.divergedAt())
	case divOperands:
		return v.errAt(pc, ErrDivergent, "%s with divergent operands (they may differ between lanes: per-thread ids, timers, or loads from a map the probes write): lanes would write different values; guard it with gpuext_lane_id() == 0", what)
	}
	return nil
}

func (v *verifier) jump(st *state, pc int, ins *asm.Instruction) (bool, error) {
	op := ins.OpCode.JumpOp()
	target := jumpTarget(pc, ins)
	if op == asm.Ja {
		v.takeEdge(pc, target)
		st.prev, st.pc = pc, target
		return false, nil
	}
	is32 := ins.OpCode.Class() == asm.Jump32Class
	a, err := v.read(st, pc, ins.Dst)
	if err != nil {
		return true, err
	}
	regSrc := ins.OpCode.Source() == asm.RegSource
	var b reg
	if regSrc {
		if b, err = v.read(st, pc, ins.Src); err != nil {
			return true, err
		}
	} else {
		c := uint64(ins.Constant)
		if is32 {
			c = uint64(uint32(ins.Constant))
		}
		b = scalarReg(sconst(c), false)
	}
	taken, fall := st.clone(), st
	okT, okF := true, true
	div := a.div || b.div
	if a.k.isPtr() || b.k.isPtr() {
		if !(op == asm.JEq || op == asm.JNE) || !a.k.isPtr() || b.k != kScalar || !b.s.isConst() || b.s.t.v != 0 || is32 {
			return true, v.errAt(pc, ErrMemory, "pointer comparison (%v of a %s and a %s): only a null check of a map value pointer is allowed", op, a.k, b.k)
		}
		eq, ne := taken, fall
		if op == asm.JNE {
			eq, ne = fall, taken
		}
		if a.k == kMapValueOrNull {
			nullCheck(eq, a.id, true)
			nullCheck(ne, a.id, false)
		} else if op == asm.JEq {
			okT = false
		} else {
			okF = false
		}
	} else {
		okT = v.branch(taken, op, is32, regSrc, ins, a, b)
		okF = v.branch(fall, negate(op), is32, regSrc, ins, a, b)
	}
	if okT && okF && div && st.ctrl != cLeader {
		r := region{branch: pc, reconv: v.g.ipdom[pc], ctrl: st.ctrl, tidZero: st.tidZero}
		for _, s := range []*state{taken, fall} {
			if !hasRegion(s, pc) {
				s.regions = append(s.regions, r)
			}
			s.ctrl = cDivergent
		}
		if (op == asm.JEq || op == asm.JNE) && !regSrc && ins.Constant == 0 && a.tag != tagNone && !a.shifted {
			eq := taken
			if op == asm.JNE {
				eq = fall
			}
			switch a.tag {
			case tagLane, tagThreadLinear:
				eq.ctrl = cLeader
			default:
				eq.tidZero |= 1 << (a.tag - tagTidX)
				if eq.tidZero == 7 {
					eq.ctrl = cLeader
				}
			}
		}
	}
	switch {
	case okT && okF:
		v.takeEdge(pc, target)
		taken.prev, taken.pc = pc, target
		v.work = append(v.work, taken)
		st.prev, st.pc = pc, pc+1
		return false, nil
	case okT:
		v.takeEdge(pc, target)
		*st = *taken
		st.prev, st.pc = pc, target
		return false, nil
	case okF:
		st.prev, st.pc = pc, pc+1
		return false, nil
	}
	return true, nil
}

func hasRegion(s *state, branch int) bool {
	for _, r := range s.regions {
		if r.branch == branch {
			return true
		}
	}
	return false
}

func (v *verifier) takeEdge(pc, target int) {
	if target <= pc {
		v.backEdges[pc]++
	}
}

// nullCheck turns every copy of map_lookup_elem result id into a null
// scalar or a map value pointer.
func nullCheck(st *state, id uint32, isNull bool) {
	fix := func(r *reg) {
		if r.k != kMapValueOrNull || r.id != id {
			return
		}
		if isNull {
			*r = reg{k: kScalar, s: sconst(0), div: r.div}
		} else {
			r.k, r.id = kMapValue, 0
		}
	}
	for i := range st.r {
		fix(&st.r[i])
	}
	for i := range st.stk {
		if st.stk[i].spill {
			fix(&st.stk[i].r)
		}
	}
}

// branch narrows st's registers under "a op b"; false: impossible.
func (v *verifier) branch(st *state, op asm.JumpOp, is32, regSrc bool, ins *asm.Instruction, a, b reg) bool {
	if is32 {
		lim := uint64(math.MaxUint32)
		switch op {
		case asm.JSGT, asm.JSGE, asm.JSLT, asm.JSLE:
			lim = math.MaxInt32
		}
		if a.s.umax > lim || b.s.umax > lim {
			if a.s.isConst() && b.s.isConst() {
				return cmp32(op, uint32(a.s.t.v), uint32(b.s.t.v))
			}
			return true
		}
	}
	na, nb, ok := refine(op, a.s, b.s)
	if !ok {
		return false
	}
	setScalar(st, ins.Dst, a.id, na)
	if regSrc {
		setScalar(st, ins.Src, b.id, nb)
	}
	return true
}

func cmp32(op asm.JumpOp, a, b uint32) bool {
	switch op {
	case asm.JEq:
		return a == b
	case asm.JNE:
		return a != b
	case asm.JGT:
		return a > b
	case asm.JGE:
		return a >= b
	case asm.JLT:
		return a < b
	case asm.JLE:
		return a <= b
	case asm.JSGT:
		return int32(a) > int32(b)
	case asm.JSGE:
		return int32(a) >= int32(b)
	case asm.JSLT:
		return int32(a) < int32(b)
	case asm.JSLE:
		return int32(a) <= int32(b)
	case asm.JSet:
		return a&b != 0
	case jNotSet:
		return a&b == 0
	}
	return true
}

// setScalar gives r (and every copy of it) the narrowed value s.
func setScalar(st *state, r asm.Register, id uint32, s scalar) {
	st.r[r].s = s
	if id == 0 {
		return
	}
	for i := range st.r {
		if st.r[i].k == kScalar && st.r[i].id == id {
			st.r[i].s = s
		}
	}
	for i := range st.stk {
		if sl := &st.stk[i]; sl.spill && sl.r.k == kScalar && sl.r.id == id {
			sl.r.s = s
		}
	}
}
