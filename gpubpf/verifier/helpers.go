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

	"github.com/gpuext/gpuext/gpubpf/abi"
)

// allowedHelpers is the whitelist per attach point: what the device
// runtime implements (abi.HelperNames), the same at entry and exit.
var allowedHelpers = map[abi.Attach]map[int32]bool{
	abi.KernelEntry: whitelist(),
	abi.KernelExit:  whitelist(),
}

func whitelist() map[int32]bool {
	w := map[int32]bool{}
	for id := range abi.HelperNames {
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
	if n, ok := abi.HelperNames[id]; ok {
		return n
	}
	s := asm.BuiltinFunc(id).String()
	if !strings.HasPrefix(s, "Fn") {
		return fmt.Sprintf("helper#%d", id)
	}
	return "bpf_" + strings.ToLower(camel.ReplaceAllString(strings.TrimPrefix(s, "Fn"), "${1}_${2}"))
}

// writesThroughArgs: bpftime's id helpers, which store three u64 through
// r1, r2 and r3.
func writesThroughArgs(id int32) bool {
	switch id {
	case abi.BtBlockIdx, abi.BtBlockDim, abi.BtThreadIdx, abi.BtGridDim:
		return true
	}
	return false
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
	if v.bt {
		if n, ok := abi.BpftimeHelperNames[id]; ok {
			v.helpers[n] = true
			r0, err := v.bpftimeHelper(st, pc, id, n)
			if err != nil {
				return err
			}
			for r := asm.R1; r <= asm.R5; r++ {
				st.r[r] = reg{}
			}
			return v.write(st, pc, asm.R0, r0)
		}
		if id == abi.BtExit {
			return v.errAt(pc, ErrHelper, "helper bpf_cuda_exit (%d) ends the kernel's thread: a probe must not change what the kernel does", id)
		}
	}
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
	ids := slices.Sorted(maps.Keys(abi.HelperNames))
	ns := make([]string, len(ids))
	for i, id := range ids {
		ns[i] = abi.HelperNames[id]
	}
	return strings.Join(ns, ", ")
}

// helper checks the arguments of a whitelisted helper and returns r0.
func (v *verifier) helper(st *state, pc int, id int32, name string) (reg, error) {
	u32 := urange(0, math.MaxUint32)
	switch id {
	case abi.HelperMapLookupElem:
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
		div := mdiv || kdiv || (m.typ == abi.MapHash && v.written[m.name])
		own := m.typ == abi.MapPerThread || (m.typ == abi.MapArray && v.injectiveKey(st))
		v.nextID++
		return reg{k: kMapValueOrNull, m: v.mapIdx[m.name], id: v.nextID, div: div || own, own: own}, nil
	case abi.HelperMapUpdateElem:
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
		if (m.typ == abi.MapArray || m.typ == abi.MapPerThread) && flags.s.isConst() && flags.s.t.v == noExist {
			// an array entry always exists: BPF_NOEXIST writes nothing (-EEXIST)
			return scalarReg(sunknown(), true), nil
		}
		v.wrote[m.name] = true
		what := fmt.Sprintf("%s on map %q", name, m.name)
		switch {
		case m.typ == abi.MapPerThread:
			return scalarReg(sunknown(), true), nil // the thread's own row
		case m.typ == abi.MapArray && v.injectiveKey(st):
			return scalarReg(sunknown(), true), nil // the thread's own entry
		case v.bt:
			if err := v.sharedUpdate(st, pc, m, what); err != nil {
				return reg{}, err
			}
			return scalarReg(sunknown(), true), nil
		}
		if err := v.idempotent(st, pc, what, mdiv || kdiv || vdiv || flags.div); err != nil {
			return reg{}, err
		}
		return scalarReg(sunknown(), true), nil
	case abi.HelperMapDeleteElem:
		m, mdiv, err := v.mapArg(st, pc, name, false)
		if err != nil {
			return reg{}, err
		}
		if m.typ != abi.MapHash {
			return reg{}, v.errAt(pc, ErrHelper, "%s on %v map %q: only hash entries can be deleted", name, m.typ, m.name)
		}
		kdiv, err := v.memArg(st, pc, name, asm.R2, "key", int64(m.spec.KeySize))
		if err != nil {
			return reg{}, err
		}
		v.wrote[m.name] = true
		if v.bt {
			return scalarReg(sunknown(), true), nil // each lane's delete is one linearized operation
		}
		if err := v.idempotent(st, pc, fmt.Sprintf("%s on map %q", name, m.name), mdiv || kdiv); err != nil {
			return reg{}, err
		}
		return scalarReg(sunknown(), true), nil
	case abi.HelperRingbufOutput:
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
		if st.ctrl != cLeader && !m.perLane {
			return reg{}, v.errAt(pc, ErrDivergent, "%s to map %q by every lane: it would append one record per thread; guard it with gpuext_lane_id() == 0, or declare a per-lane GPU ring buffer (type %d)", name, m.name, abi.BtMapGPURingbuf)
		}
		return scalarReg(sunknown(), true), nil
	case abi.HelperKtimeGetNs, abi.HelperGlobaltimer:
		return scalarReg(sunknown(), true), nil
	case abi.HelperSmpProcessorID, abi.HelperSmID, abi.HelperWarpID:
		return scalarReg(u32, false), nil
	case abi.HelperBlockLinearID:
		return reg{k: kScalar, s: u32, tag: tagBlockLinear}, nil
	case abi.HelperLaneID:
		return reg{k: kScalar, s: urange(0, 31), div: true, tag: tagLane}, nil
	case abi.HelperGlobalThreadID:
		return reg{k: kScalar, s: u32, div: true, tag: tagGlobal}, nil
	case abi.HelperThreadLinearID:
		return reg{k: kScalar, s: u32, div: true, tag: tagThreadLinear}, nil
	case abi.HelperThreadIdx, abi.HelperBlockIdx, abi.HelperBlockDim, abi.HelperGridDim:
		dim, err := v.scalarArg(st, pc, name, asm.R1, "dim")
		if err != nil {
			return reg{}, err
		}
		if !dim.s.isConst() || dim.s.t.v > 2 {
			return reg{}, v.errAt(pc, ErrHelper, "%s: dim must be a constant 0, 1 or 2, is [%d, %d]", name, dim.s.umin, dim.s.umax)
		}
		if id == abi.HelperThreadIdx {
			return reg{k: kScalar, s: u32, div: true, tag: tagTidX + leaderTag(dim.s.t.v)}, nil
		}
		if id == abi.HelperBlockIdx {
			return reg{k: kScalar, s: u32, tag: tagBidX + leaderTag(dim.s.t.v)}, nil
		}
		return scalarReg(u32, false), nil
	}
	return reg{}, v.errAt(pc, ErrHelper, "helper %s (%d) has no argument checks", name, id)
}

// noExist is BPF_NOEXIST.
const noExist = 1

// injectiveKey: r2 points at a u32 key that is a strictly increasing
// function of gpuext_global_thread_id() (tagGlobal) below 2^32: no two
// threads of a launch ask for the same entry.
func (v *verifier) injectiveKey(st *state) bool {
	k, ok := stackKey(st, st.r[asm.R2])
	return ok && k.k == kScalar && k.tag == tagGlobal && !k.shifted && k.s.umax <= math.MaxUint32
}

// sharedUpdate is bpftime's rule for map_update_elem on a map other
// threads also write: a value of up to 8 bytes is one atomic exchange and
// a larger one is written under the entry's lock, so any lane may update
// (the last writer wins), unless the value was computed from a load of
// the same map (a read-modify-write race). A value that points into the
// same map is the entry itself or another: the helper skips a copy onto
// itself, and copies another whole.
func (v *verifier) sharedUpdate(st *state, pc int, m *mapRef, what string) error {
	p := st.r[asm.R3]
	mi := v.mapIdx[m.name]
	var src uint64
	switch p.k {
	case kStack:
		for a := p.off; a < p.off+int64(m.spec.ValueSize) && a < 0; a++ {
			sl := st.stk[(a+stackSize)/8]
			if sl.spill {
				src |= sl.r.src
			} else {
				src |= sl.src
			}
		}
	case kMapValue:
		if p.m == mi && m.spec.ValueSize > 8 && !st.launchLeader() {
			return v.errAt(pc, ErrDivergent, "%s with a value read from the same map while other lanes write it: a value of %d bytes is not read atomically", what, m.spec.ValueSize)
		}
	}
	if mi < 64 && src&(1<<mi) != 0 && !st.launchLeader() {
		return v.errAt(pc, ErrDivergent, "%s with a value computed from a load of the same map: every lane of every block runs it, and lanes that read the entry before another lane's update lose that update (a read-modify-write race); use __sync_fetch_and_add on the looked-up value, or a per-thread map", what)
	}
	return nil
}

// bpftimeHelper checks a bpftime GPU helper or a host helper defined for
// the device (abi.BpftimeHelperNames) and returns r0.
func (v *verifier) bpftimeHelper(st *state, pc int, id int32, name string) (reg, error) {
	u32 := urange(0, math.MaxUint32)
	zero := scalarReg(sconst(0), false)
	switch id {
	case abi.BtPuts, abi.BtTracePrintk, abi.BtMembar:
		return zero, nil // dropped (puts, printk) or a fence: nothing the program can see
	case abi.BtGlobaltimer:
		return scalarReg(sunknown(), true), nil
	case abi.BtSmID, abi.BtWarpID:
		return scalarReg(u32, false), nil
	case abi.BtLaneID:
		return reg{k: kScalar, s: urange(0, 31), div: true, tag: tagLane}, nil
	case abi.BtPidTgid:
		return scalarReg(sunknown(), false), nil // one process: the same in every lane
	case abi.BtBlockIdx, abi.BtBlockDim, abi.BtThreadIdx, abi.BtGridDim:
		for i, r := range []asm.Register{asm.R1, asm.R2, asm.R3} {
			p := st.r[r]
			if p.k != kStack {
				return reg{}, v.errAt(pc, ErrHelper, "%s: r%d must point to the stack (8 bytes for the %c component), is %s", name, r, "xyz"[i], p.k.article())
			}
			val := scalarReg(u32, false)
			switch id {
			case abi.BtThreadIdx:
				val = reg{k: kScalar, s: u32, div: true, tag: tagTidX + leaderTag(i)}
			case abi.BtBlockIdx:
				val.tag = tagBidX + leaderTag(i)
			}
			if err := v.writeStack(st, pc, p.off, 8, val); err != nil {
				return reg{}, err
			}
		}
		return zero, nil
	case abi.BtPerfOutput:
		// bpf_perf_event_output(ctx, map, flags, data, size): r1 is not used
		m := st.r[asm.R2]
		if m.k != kMapPtr || v.maps[m.m].spec.Type != ebpf.RingBuf && v.maps[m.m].typ != abi.MapRingbuf {
			return reg{}, v.errAt(pc, ErrHelper, "%s: r2 must be a ring buffer map (bpftime's GPU ring buffer, type %d), is %s", name, abi.BtMapGPURingbuf, m.k.article())
		}
		ring := v.maps[m.m]
		size, err := v.scalarArg(st, pc, name, asm.R5, "size")
		if err != nil {
			return reg{}, err
		}
		if size.s.umin == 0 || size.s.umax > stackSize || size.s.umax > uint64(ring.spec.MaxEntries)*uint64(max(ring.spec.ValueSize, 1)) {
			return reg{}, v.errAt(pc, ErrHelper, "%s: size must be in [1, 512], is [%d, %d]", name, size.s.umin, size.s.umax)
		}
		if ring.spec.ValueSize != 0 && size.s.umax > uint64(ring.spec.ValueSize) {
			return reg{}, v.errAt(pc, ErrHelper, "%s: size up to %d, more than map %q's %d-byte records", name, size.s.umax, ring.name, ring.spec.ValueSize)
		}
		if _, err := v.memArg(st, pc, name, asm.R4, "data", int64(size.s.umax)); err != nil {
			return reg{}, err
		}
		if _, err := v.scalarArg(st, pc, name, asm.R3, "flags"); err != nil {
			return reg{}, err
		}
		v.wrote[ring.name] = true
		if st.ctrl != cLeader && !ring.perLane {
			return reg{}, v.errAt(pc, ErrDivergent, "%s to map %q by every lane: it is not a per-lane GPU ring buffer (type %d); guard it with a lane-0 test", name, ring.name, abi.BtMapGPURingbuf)
		}
		return scalarReg(sunknown(), true), nil
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
	if ringbuf && m.typ != abi.MapRingbuf {
		return nil, false, v.errAt(pc, ErrHelper, "%s: map %q is a %v, want a ring buffer", name, m.name, m.spec.Type)
	}
	if !ringbuf && m.typ == abi.MapRingbuf {
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
