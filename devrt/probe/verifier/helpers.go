package verifier

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/devrt/probe"
)

// allowedHelpers is the whitelist per attach point: what the device
// runtime implements (probe.HelperNames), the same at entry and exit.
var allowedHelpers = map[probe.Attach]map[int32]bool{
	probe.KernelEntry: whitelist(),
	probe.KernelExit:  whitelist(),
}

func whitelist() map[int32]bool {
	w := map[int32]bool{}
	for id := range probe.HelperNames {
		w[id] = true
	}
	return w
}

// hostRoundTrip are kernel helpers that need the host (a print buffer, a
// perf ring, another address space, the current task): a GPU thread cannot
// call them.
var hostRoundTrip = map[int32]bool{
	4: true, 6: true, 14: true, 15: true, 16: true, 25: true, 35: true, 36: true, 45: true,
	80: true, 112: true, 113: true, 114: true, 115: true, 123: true, 158: true, 165: true, 177: true,
}

var camel = regexp.MustCompile(`([a-z0-9])([A-Z])`)

// helperName names a helper for messages: the device name, else the
// kernel's bpf_* name.
func helperName(id int32) string {
	if n, ok := probe.HelperNames[id]; ok {
		return n
	}
	s := asm.BuiltinFunc(id).String()
	if !strings.HasPrefix(s, "Fn") {
		return fmt.Sprintf("helper#%d", id)
	}
	return "bpf_" + strings.ToLower(camel.ReplaceAllString(strings.TrimPrefix(s, "Fn"), "${1}_${2}"))
}

func (v *verifier) call(st *state, pc int, ins *asm.Instruction) error {
	switch { // (BPF-to-BPF calls never get here: buildCFG refuses them)
	case ins.IsKfuncCall():
		return v.errAt(pc, ErrHelper, "kfunc calls are not allowed in device probes")
	case !ins.IsBuiltinCall():
		return v.errAt(pc, ErrProgram, "unsupported call %v", ins)
	}
	id := int32(ins.Constant)
	name := helperName(id)
	if !allowedHelpers[v.attach][id] {
		if hostRoundTrip[id] {
			return v.errAt(pc, ErrHelper, "helper %s (%d) needs a host round trip; not allowed at %v", name, id, v.attach)
		}
		return v.errAt(pc, ErrHelper, "helper %s (%d) is not allowed at %v (a device probe may call %s)", name, id, v.attach, deviceHelperList())
	}
	v.helpers[name] = true
	r0, err := v.helper(st, pc, id, name)
	if err != nil {
		return err
	}
	for r := asm.R1; r <= asm.R5; r++ {
		st.r[r] = reg{}
	}
	return v.write(st, pc, asm.R0, r0)
}

func deviceHelperList() string {
	ids := slices.Sorted(maps.Keys(probe.HelperNames))
	ns := make([]string, len(ids))
	for i, id := range ids {
		ns[i] = probe.HelperNames[id]
	}
	return strings.Join(ns, ", ")
}

// helper checks the arguments of a whitelisted helper and returns r0.
func (v *verifier) helper(st *state, pc int, id int32, name string) (reg, error) {
	u32 := urange(0, math.MaxUint32)
	switch id {
	case probe.HelperMapLookupElem:
		m, mdiv, err := v.mapArg(st, pc, name, false)
		if err != nil {
			return reg{}, err
		}
		kdiv, err := v.memArg(st, pc, name, asm.R2, "key", int64(m.spec.KeySize))
		if err != nil {
			return reg{}, err
		}
		// The address of an entry is the same for every lane that asks for
		// the same key, unless a hash entry appears or goes meanwhile.
		div := mdiv || kdiv || (m.typ == probe.MapHash && v.written[m.name])
		v.nextID++
		return reg{k: kMapValueOrNull, m: v.mapIdx[m.name], id: v.nextID, div: div}, nil
	case probe.HelperMapUpdateElem:
		m, mdiv, err := v.mapArg(st, pc, name, false)
		if err != nil {
			return reg{}, err
		}
		if err := v.writable(pc, reg{m: v.mapIdx[m.name]}); err != nil {
			return reg{}, err
		}
		kdiv, err := v.memArg(st, pc, name, asm.R2, "key", int64(m.spec.KeySize))
		if err != nil {
			return reg{}, err
		}
		vdiv, err := v.memArg(st, pc, name, asm.R3, "value", int64(m.spec.ValueSize))
		if err != nil {
			return reg{}, err
		}
		flags, err := v.scalarArg(st, pc, name, asm.R4, "flags")
		if err != nil {
			return reg{}, err
		}
		v.wrote[m.name] = true
		if err := v.idempotent(st, pc, fmt.Sprintf("%s on map %q", name, m.name), mdiv || kdiv || vdiv || flags.div); err != nil {
			return reg{}, err
		}
		return scalarReg(sunknown(), true), nil
	case probe.HelperMapDeleteElem:
		m, mdiv, err := v.mapArg(st, pc, name, false)
		if err != nil {
			return reg{}, err
		}
		if m.typ != probe.MapHash {
			return reg{}, v.errAt(pc, ErrHelper, "%s on %v map %q: only hash entries can be deleted", name, m.typ, m.name)
		}
		kdiv, err := v.memArg(st, pc, name, asm.R2, "key", int64(m.spec.KeySize))
		if err != nil {
			return reg{}, err
		}
		v.wrote[m.name] = true
		if err := v.idempotent(st, pc, fmt.Sprintf("%s on map %q", name, m.name), mdiv || kdiv); err != nil {
			return reg{}, err
		}
		return scalarReg(sunknown(), true), nil
	case probe.HelperRingbufOutput:
		m, _, err := v.mapArg(st, pc, name, true)
		if err != nil {
			return reg{}, err
		}
		size, err := v.scalarArg(st, pc, name, asm.R3, "size")
		if err != nil {
			return reg{}, err
		}
		if size.s.umin == 0 || size.s.umax > stackSize || size.s.umax > uint64(m.spec.MaxEntries) {
			return reg{}, v.errAt(pc, ErrHelper, "%s: size must be in [1, min(512, ring bytes %d)], is [%d, %d]", name, m.spec.MaxEntries, size.s.umin, size.s.umax)
		}
		if _, err := v.memArg(st, pc, name, asm.R2, "data", int64(size.s.umax)); err != nil {
			return reg{}, err
		}
		if _, err := v.scalarArg(st, pc, name, asm.R4, "flags"); err != nil {
			return reg{}, err
		}
		v.wrote[m.name] = true
		if st.ctrl != cLeader {
			return reg{}, v.errAt(pc, ErrDivergent, "%s to map %q by every lane: it would append one record per thread; guard it with gpuext_lane_id() == 0", name, m.name)
		}
		return scalarReg(sunknown(), true), nil
	case probe.HelperKtimeGetNs, probe.HelperGlobaltimer:
		return scalarReg(sunknown(), true), nil
	case probe.HelperSmpProcessorID, probe.HelperSmID, probe.HelperWarpID, probe.HelperBlockLinearID:
		return scalarReg(u32, false), nil
	case probe.HelperLaneID:
		return reg{k: kScalar, s: urange(0, 31), div: true, tag: tagLane}, nil
	case probe.HelperThreadLinearID:
		return reg{k: kScalar, s: u32, div: true, tag: tagThreadLinear}, nil
	case probe.HelperThreadIdx, probe.HelperBlockIdx, probe.HelperBlockDim, probe.HelperGridDim:
		dim, err := v.scalarArg(st, pc, name, asm.R1, "dim")
		if err != nil {
			return reg{}, err
		}
		if !dim.s.isConst() || dim.s.t.v > 2 {
			return reg{}, v.errAt(pc, ErrHelper, "%s: dim must be a constant 0, 1 or 2, is [%d, %d]", name, dim.s.umin, dim.s.umax)
		}
		if id == probe.HelperThreadIdx {
			return reg{k: kScalar, s: u32, div: true, tag: tagTidX + leaderTag(dim.s.t.v)}, nil
		}
		return scalarReg(u32, false), nil
	}
	return reg{}, v.errAt(pc, ErrHelper, "helper %s (%d) has no argument checks", name, id)
}

// mapArg checks that r1 is a map pointer fit for the helper.
func (v *verifier) mapArg(st *state, pc int, name string, ringbuf bool) (*mapRef, bool, error) {
	r := st.r[asm.R1]
	if r.k != kMapPtr {
		return nil, false, v.errAt(pc, ErrHelper, "%s: r1 must be a map pointer, is %s", name, r.k.article())
	}
	m := v.maps[r.m]
	if ringbuf && m.spec.Type != ebpf.RingBuf {
		return nil, false, v.errAt(pc, ErrHelper, "%s: map %q is a %v, want a ring buffer", name, m.name, m.spec.Type)
	}
	if !ringbuf && m.spec.Type == ebpf.RingBuf {
		return nil, false, v.errAt(pc, ErrHelper, "%s on ring buffer %q: a ring buffer is only for ringbuf_output", name, m.name)
	}
	return m, r.div, nil
}

func (v *verifier) scalarArg(st *state, pc int, name string, r asm.Register, what string) (reg, error) {
	x := st.r[r]
	if x.k != kScalar {
		return reg{}, v.errAt(pc, ErrHelper, "%s: %s (r%d) must be a scalar, is %s", name, what, r, x.k.article())
	}
	return x, nil
}

// memArg checks that register r points at n readable bytes (written stack,
// or a map value); div: the bytes may differ between lanes.
func (v *verifier) memArg(st *state, pc int, name string, r asm.Register, what string, n int64) (bool, error) {
	p := st.r[r]
	switch p.k {
	case kStack:
		div, err := v.stackRange(st, pc, p.off, n, fmt.Sprintf("%s %s (r%d)", name, what, r))
		return div || p.div, err
	case kMapValue:
		m := v.maps[p.m]
		vs := int64(m.spec.ValueSize)
		if p.s.smin < -(1<<30) || p.s.smax > 1<<30 {
			return false, v.errAt(pc, ErrMemory, "%s %s: map %q value at an unbounded offset", name, what, m.name)
		}
		lo, hi := p.off+p.s.smin, p.off+p.s.smax+n
		if lo < 0 || hi > vs {
			return false, v.errAt(pc, ErrMemory, "%s %s: bytes [%d, %d) of map %q value, which has %d", name, what, lo, hi, m.name, vs)
		}
		return p.div || v.written[m.name], nil
	case kMapValueOrNull:
		return false, v.errAt(pc, ErrMemory, "%s %s (r%d) may be null: check the map_lookup_elem result against 0 first", name, what, r)
	}
	return false, v.errAt(pc, ErrHelper, "%s: %s (r%d) must point to the stack or a map value, is %s", name, what, r, p.k.article())
}
