package verifier

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/gpubpf/abi"
)

// Loads, stores and atomics: ctx, stack and map value accesses, and the
// side-effect rules for writes into maps.

// ctxFields are the fields of struct gpuext_probe_ctx (offset, size),
// taken from its Go mirror abi.Ctx.
var ctxFields = func() []struct{ off, size int64 } {
	var fs []struct{ off, size int64 }
	t := reflect.TypeOf(abi.Ctx{})
	for i := range t.NumField() {
		f := t.Field(i)
		fs = append(fs, struct{ off, size int64 }{int64(f.Offset), int64(f.Type.Size())})
	}
	return fs
}()

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
			return v.errAt(pc, ErrMemory, "ctx read of %d bytes at offset %d: not a field of struct gpuext_probe_ctx (%d bytes)", size, off, abi.CtxSize)
		}
		out = scalarReg(sizeRange(size), base.div)
	case kMapValue:
		if err := v.mapAccess(pc, base, ins.Offset, size); err != nil {
			return err
		}
		name := v.maps[base.m].name
		out = scalarReg(sizeRange(size), base.div || v.written[name] || base.own)
		if base.m < 64 {
			out.src = 1 << base.m
		}
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
		if b == 0 && size == 4 && sl.r.s.umax <= 0xffffffff {
			return sl.r, nil // the low half of a u32 spilled whole: the value itself
		}
		out := scalarReg(sizeRange(size), sl.r.div)
		out.src = sl.r.src
		return out, nil
	}
	if size == 4 && b%4 == 0 && sl.has4[b/4] {
		return sl.w4[b/4], nil
	}
	out := scalarReg(sizeRange(size), sl.div)
	out.src = sl.src
	return out, nil
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
			*sl = slot{init: 0xff, div: sl.r.div, src: sl.r.src}
		} else {
			*sl = slot{} // the rest of a pointer is not readable
		}
	}
	sl.init |= uint8((1<<size - 1) << b)
	sl.div = sl.div || val.div
	sl.src |= val.src
	for h := int64(0); h < 2; h++ {
		if b < 4*h+4 && b+int64(size) > 4*h {
			sl.w4[h], sl.has4[h] = reg{}, false // overwritten, at least in part
		}
	}
	if size == 4 && b%4 == 0 && val.k == kScalar {
		sl.w4[b/4], sl.has4[b/4] = val, true
	}
	return nil
}

// stackKey is the u32 at [r+0..4) when r points at the stack and the
// bytes are one known scalar (a 4-byte store, or a spill of a u32).
func stackKey(st *state, p reg) (reg, bool) {
	if p.k != kStack || p.off < -stackSize || p.off+4 > 0 {
		return reg{}, false
	}
	i, b := (p.off+stackSize)/8, (p.off+stackSize)%8
	sl := st.stk[i]
	switch {
	case b == 0 && sl.spill && sl.r.k == kScalar && sl.r.s.umax <= 0xffffffff:
		return sl.r, true
	case b%4 == 0 && !sl.spill && sl.has4[b/4]:
		return sl.w4[b/4], true
	}
	return reg{}, false
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
		if _, ok := v.fusable[pc]; ok {
			v.unfused[pc] = true
		}
		return v.writeStack(st, pc, base.off+int64(ins.Offset), size, val)
	case kMapValue:
		if _, ok := v.fusable[pc]; ok {
			if base.own || st.launchLeader() {
				v.unfused[pc] = true // private already: a plain add
			} else {
				v.fusedStore[pc] = true
			}
		}
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
		if base.own {
			return nil // the thread's own entry: no other thread of the launch writes it
		}
		if v.bt {
			return v.sharedStore(st, pc, base, val, fmt.Sprintf("store into map %q", name))
		}
		what := fmt.Sprintf("store into map %q", name)
		if base.div {
			what += sharedEntryHint
		}
		return v.idempotent(st, pc, what, base.div || val.div)
	}
	return v.derefError(pc, base, "write")
}

// sharedEntryHint explains a write to an entry looked up with a key that
// differs between lanes but is not shown to be the thread's own.
const sharedEntryHint = " (an entry whose key differs between lanes but is not shown injective in the thread's id in the launch: lanes with equal keys, e.g. threads of different blocks for a key from thread indices, race on it; key it by gpuext_global_thread_id() or a strictly increasing function of it, or use a per-thread map)"

// sharedStore is bpftime's rule for a store into a map value other threads
// may also write: every thread is an event, so any lane may store (the
// last writer wins, each value whole), unless the stored value was
// computed from a load of the same map: that read-modify-write loses
// other threads' updates between the load and the store. The fused form
// (load, add, store of one address, turned into one atomic add by the
// translator) is the exception.
func (v *verifier) sharedStore(st *state, pc int, base, val reg, what string) error {
	if base.m < 64 && val.src&(1<<base.m) != 0 && !st.launchLeader() {
		if v.fusedStore[pc] {
			return nil
		}
		return v.errAt(pc, ErrDivergent, "%s of a value computed from a load of the same map: every lane of every block runs it, and lanes that read the value before another lane's store lose that update (a read-modify-write race); use __sync_fetch_and_add or a per-thread map", what)
	}
	return nil
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
	if st.ctrl != cLeader && !base.own && !v.bt {
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
