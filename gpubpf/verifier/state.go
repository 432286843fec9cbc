package verifier

// kind is what a register (or spilled stack slot) holds.
type kind uint8

const (
	kNone           kind = iota // never written: reading it is an error
	kScalar                     // an integer
	kCtx                        // pointer into struct gpuext_probe_ctx
	kStack                      // pointer into the 512-byte stack (r10 + off)
	kMapPtr                     // a map (ld_imm64): only a helper argument
	kMapValue                   // pointer into a map value, not null
	kMapValueOrNull             // map_lookup_elem result before the null check
)

func (k kind) String() string {
	switch k {
	case kNone:
		return "uninitialised"
	case kScalar:
		return "scalar"
	case kCtx:
		return "ctx pointer"
	case kStack:
		return "stack pointer"
	case kMapPtr:
		return "map pointer"
	case kMapValue:
		return "map value pointer"
	case kMapValueOrNull:
		return "map value pointer that may be null"
	}
	return "?"
}

// article is k with its indefinite article, for messages.
func (k kind) article() string {
	if k == kNone {
		return "not set (uninitialised register)"
	}
	return "a " + k.String()
}

func (k kind) isPtr() bool { return k >= kCtx }

// leaderTag marks a scalar that is exactly the value of a helper whose
// "== 0" picks one thread: a leader guard.
type leaderTag uint8

const (
	tagNone         leaderTag = iota
	tagLane                   // gpuext_lane_id(): one lane per warp
	tagThreadLinear           // gpuext_thread_linear_id(): one thread per block
	tagTidX                   // gpuext_thread_idx(0); x, y and z all 0: one thread per block
	tagTidY
	tagTidZ
	tagBidX // a block index component (bpftime's block_idx, gpuext_block_idx(d)): all three 0 is block 0
	tagBidY
	tagBidZ
	tagBlockLinear // gpuext_block_linear_id(): 0 is block 0
	tagGlobal      // a strictly increasing function of gpuext_global_thread_id(), never wrapped: injective over the launch's threads
)

// reg is the abstract value of a register or a spilled register.
type reg struct {
	k   kind
	s   scalar // kScalar: the value; map value pointers: the variable offset
	off int64  // pointers: the fixed offset
	m   int    // kMapPtr, kMapValue*: index into verifier.maps
	// id links copies of one scalar (a bound learnt on one holds for all)
	// and the copies of one map_lookup_elem result (for the null check).
	id  uint32
	div bool // may differ between the lanes of a warp
	tag leaderTag
	// shifted: the tagged value shifted left by 32, half of the
	// zero-extension clang emits for a u32; the right shift restores it.
	shifted bool
	// own: a map value pointer into the calling thread's own entry (a
	// per-thread map's row, or an array entry whose key is injective in
	// the launch's thread id): no other thread of the launch touches it.
	own bool
	// src: maps (bit = index into verifier.maps, the first 64) a value
	// loaded from flowed into this one: storing it back into the same
	// shared map is a read-modify-write.
	src uint64
}

func scalarReg(s scalar, div bool) reg { return reg{k: kScalar, s: s, div: div} }

// slot is 8 bytes of stack.
type slot struct {
	spill bool   // an 8-byte store of a register: r is it
	r     reg    // the spilled register
	init  uint8  // bitmask of bytes written (all when spill)
	div   bool   // !spill: some written byte may differ between lanes
	src   uint64 // !spill: maps a written byte's value was loaded from (reg.src)
	// w4[h]: !spill, bytes 4h..4h+3 were last written by a 4-byte store
	// of this scalar (a u32 key: its range, leader and global-id tags).
	w4   [2]reg
	has4 [2]bool
}

// ctrl is the control state of the lanes running a path.
type ctrl uint8

const (
	cUniform   ctrl = iota // every lane of the warp runs this path
	cDivergent             // some lanes may have left (a branch on a divergent value)
	cLeader                // exactly one lane per warp (or thread per block) runs it
)

// region is a divergent branch whose lanes have not reconverged yet.
type region struct {
	branch    int // the branch insn
	reconv    int // its immediate post-dominator, -1 = exit
	ctrl      ctrl
	tidZero   uint8 // restored with ctrl when the region ends
	oneThread bool
}

const stackSize = 512

// state is one path through the program.
type state struct {
	pc, prev int
	r        [11]reg
	stk      [stackSize / 8]slot
	ctrl     ctrl
	tidZero  uint8 // dims d with gpuext_thread_idx(d) == 0 proven on this path
	// bidZero: dims d with the block index d proven 0 on this path (7: only
	// block 0 runs it); oneThread: the leader is one thread per block, not
	// one lane per warp. Both: one thread of the launch runs the path.
	bidZero   uint8
	oneThread bool
	regions   []region
}

// launchLeader: exactly one thread of the launch runs this path (thread 0
// of block 0): nothing else in the launch races with it.
func (s *state) launchLeader() bool { return s.ctrl == cLeader && s.oneThread && s.bidZero == 7 }

func (s *state) clone() *state {
	c := *s
	c.regions = append([]region(nil), s.regions...)
	return &c
}

// divergedAt is the branch that made control divergent, for messages.
func (s *state) divergedAt() int {
	for i := len(s.regions) - 1; i >= 0; i-- {
		if s.regions[i].ctrl == cUniform {
			return s.regions[i].branch
		}
	}
	if len(s.regions) > 0 {
		return s.regions[0].branch
	}
	return -1
}

// idMap checks that the ids of an old state map one to one on those of a
// new one.
type idMap struct{ fwd, rev map[uint32]uint32 }

func (m *idMap) match(o, n uint32) bool {
	if o == 0 {
		return true
	}
	if n == 0 {
		return false
	}
	if m.fwd == nil {
		m.fwd, m.rev = map[uint32]uint32{}, map[uint32]uint32{}
	}
	if x, ok := m.fwd[o]; ok {
		return x == n
	}
	if x, ok := m.rev[n]; ok {
		return x == o
	}
	m.fwd[o], m.rev[n] = n, o
	return true
}

// regCovers reports whether every behaviour of n is one the exploration of
// o already checked: o is at least as general, as divergent, and as
// restrictive for side effects.
func regCovers(o, n reg, ids *idMap) bool {
	if o.k == kNone {
		return true
	}
	if o.k != n.k || (!o.div && n.div) {
		return false
	}
	if o.tag != tagNone && (o.tag != n.tag || o.shifted != n.shifted) {
		return false
	}
	if n.src&^o.src != 0 || (o.own && !n.own) {
		return false
	}
	switch o.k {
	case kScalar:
		return n.s.in(o.s) && ids.match(o.id, n.id)
	case kCtx, kStack:
		return o.off == n.off
	case kMapPtr:
		return o.m == n.m
	case kMapValue:
		return o.m == n.m && o.off == n.off && n.s.in(o.s)
	case kMapValueOrNull:
		return o.m == n.m && o.off == n.off && n.s.in(o.s) && ids.match(o.id, n.id)
	}
	return false
}

func slotCovers(o, n slot, ids *idMap) bool {
	if o.init == 0 {
		return true
	}
	if o.spill {
		return n.spill && regCovers(o.r, n.r, ids)
	}
	if n.init&o.init != o.init {
		return false
	}
	for h := range o.has4 {
		if o.has4[h] && (!n.has4[h] || !regCovers(o.w4[h], n.w4[h], ids)) {
			return false
		}
	}
	if n.src&^o.src != 0 {
		return false
	}
	if n.spill {
		return n.r.k == kScalar && (o.div || !n.r.div)
	}
	return o.div || !n.div
}

// covers reports whether the path o, already explored from the same insn,
// covers n: then n needs no exploring. Registers not in live are never read
// again before being written, so their values do not matter.
func covers(o, n *state, live uint16) bool {
	if o.ctrl != n.ctrl || o.tidZero != n.tidZero || o.bidZero != n.bidZero || o.oneThread != n.oneThread || len(o.regions) != len(n.regions) {
		return false
	}
	for i := range o.regions {
		if o.regions[i] != n.regions[i] {
			return false
		}
	}
	var ids idMap
	for i := range o.r {
		if live&(1<<i) == 0 {
			continue
		}
		if !regCovers(o.r[i], n.r[i], &ids) {
			return false
		}
	}
	for i := range o.stk {
		if !slotCovers(o.stk[i], n.stk[i], &ids) {
			return false
		}
	}
	return true
}

// joinScalar is the smallest scalar holding the values of both.
func joinScalar(a, b scalar) scalar {
	m := a.t.m | b.t.m | (a.t.v ^ b.t.v)
	return scalar{
		umin: min(a.umin, b.umin), umax: max(a.umax, b.umax),
		smin: min(a.smin, b.smin), smax: max(a.smax, b.smax),
		t: tnum{a.t.v &^ m, m},
	}
}

// joinReg joins two registers of one kind; ok is false when they cannot
// be joined without losing what safety depends on (kinds, maps, fixed
// offsets, null-check ids).
func joinReg(a, b reg, ids *idMap) (reg, bool) {
	if a.k != b.k {
		return reg{}, false
	}
	r := a
	r.div = a.div || b.div
	r.src = a.src | b.src
	r.own = a.own && b.own
	if a.tag != b.tag || a.shifted != b.shifted {
		r.tag, r.shifted = tagNone, false
	}
	switch a.k {
	case kNone:
	case kScalar:
		r.s = joinScalar(a.s, b.s)
		if a.id != b.id {
			r.id = 0
		}
	case kCtx, kStack:
		if a.off != b.off {
			return reg{}, false
		}
	case kMapPtr:
		if a.m != b.m {
			return reg{}, false
		}
	case kMapValue, kMapValueOrNull:
		if a.m != b.m || a.off != b.off {
			return reg{}, false
		}
		if a.k == kMapValueOrNull && !ids.match(a.id, b.id) {
			return reg{}, false
		}
		r.s = joinScalar(a.s, b.s)
	}
	return r, true
}

// join merges path n into o, the state a finished path had at the same
// insn, when they agree on control, on every live register's kind and on
// every live scalar known exactly (a loop counter keeps iterations apart);
// ranges are widened to hold both. The result covers n, so exploring it
// instead of n is sound; it saves exploring one path per combination of
// ranges (a running maximum, a sum) at every join point.
func join(o, n *state, live uint16) (*state, bool) {
	if o.ctrl != n.ctrl || o.tidZero != n.tidZero || o.bidZero != n.bidZero || o.oneThread != n.oneThread || len(o.regions) != len(n.regions) {
		return nil, false
	}
	for i := range o.regions {
		if o.regions[i] != n.regions[i] {
			return nil, false
		}
	}
	j := n.clone()
	var ids idMap
	for i := range o.r {
		if live&(1<<i) == 0 && i != 10 {
			j.r[i] = reg{}
			continue
		}
		a, b := o.r[i], n.r[i]
		if a.k == kScalar && b.k == kScalar && (a.s.isConst() || b.s.isConst()) && a.s.t.v != b.s.t.v {
			return nil, false
		}
		r, ok := joinReg(a, b, &ids)
		if !ok {
			return nil, false
		}
		j.r[i] = r
	}
	for i := range o.stk {
		a, b := o.stk[i], n.stk[i]
		switch {
		case a.spill && b.spill:
			if a.r.k == kScalar && b.r.k == kScalar && (a.r.s.isConst() || b.r.s.isConst()) && a.r.s.t.v != b.r.s.t.v {
				return nil, false
			}
			r, ok := joinReg(a.r, b.r, &ids)
			if !ok {
				return nil, false
			}
			j.stk[i].r = r
		case a.init == b.init && !a.spill && !b.spill:
			j.stk[i].div = a.div || b.div
			j.stk[i].src = a.src | b.src
			for h := range a.has4 {
				j.stk[i].w4[h], j.stk[i].has4[h] = reg{}, false
				if a.has4[h] && b.has4[h] {
					r, ok := joinReg(a.w4[h], b.w4[h], &ids)
					j.stk[i].w4[h], j.stk[i].has4[h] = r, ok
				}
			}
		default:
			return nil, false
		}
	}
	return j, true
}
