package ptx

import (
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/devmap"
	"github.com/gpuext/gpuext/gpubpf/verifier"
)

// atomicOnlyMaps returns the per-warp maps of a module whose values every
// program touches only through atomics on the pointer an inlined lookup
// returned (launch-count's and launch-stats' counters), or through the
// load, add, store triples the translator makes one atomic add (fused, per
// program: verifier.Result.FusedAdds) whose loaded and summed values the
// program does not read afterwards. A per-warp map's value is the sum of
// its slots, and the slot (%smid*64 + %warpid) exists
// so that a warp may write its copy with plain stores; for a map only ever
// updated atomically any slot gives the same sum, so the inline form takes
// the block's linear index instead: the block index is in uniform
// registers, where %smid and %warpid are special-register reads on the
// probing thread's path (measured on the H200: 5.7% against 9.1% on a
// ~3 us kernel, test/gpu/probe_cost.cu). Blocks running at the same time
// have different indices, so they still do not share a slot.
//
// The analysis is a forward dataflow over each program's main function: a
// register may hold the value pointer of a set of maps; reading such a
// register other than as an atomic's address, in a comparison with 0, as a
// copy, or as the return value disqualifies those maps. A map helper call
// that is not an inlined lookup, and any bpf-to-bpf call, disqualifies
// every per-warp map (its pointer or its map could be anywhere).
func atomicOnlyMaps(spec *ebpf.CollectionSpec, progs []string, fused map[string][]int) map[string]bool {
	return onlyAddedTo(spec, progs, fused, func(name string, ms *ebpf.MapSpec) bool {
		l, err := devmap.SpecLayout(ms)
		return err == nil && l.Type == abi.MapPerWarp
	})
}

// onlyAddedTo returns the maps of spec that want accepts (at most 64) whose
// values progs only add to, atomically or by fused triples (atomicOnlyMaps).
func onlyAddedTo(spec *ebpf.CollectionSpec, progs []string, fused map[string][]int, want func(string, *ebpf.MapSpec) bool) map[string]bool {
	var cands []string
	index := map[string]int{}
	for name, ms := range spec.Maps {
		if len(cands) < 64 && want(name, ms) {
			index[name] = len(cands)
			cands = append(cands, name)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	var bad, used uint64
	all := uint64(1)<<len(cands) - 1
	for _, name := range progs {
		ps := spec.Programs[name]
		if ps == nil {
			return nil
		}
		b, u := atomicOnlyProg(spec, ps.Instructions, index, all, fusedSet(fused[name]))
		bad |= b
		used |= u
	}
	out := map[string]bool{}
	for name, i := range index {
		if used&(1<<i) != 0 && bad&(1<<i) == 0 {
			out[name] = true
		}
	}
	return out
}

// atomicOnlyProg: the maps of index (bit masks over it) a program
// disqualifies and those it looks up. fused holds the raw indices of the
// loads that begin a fused load, add, store.
func atomicOnlyProg(spec *ebpf.CollectionSpec, insns asm.Instructions, index map[string]int, all uint64, fused map[int]bool) (bad, used uint64) {
	ix := indexInsns(insns)
	raw := ix.raw
	targets := map[int]bool{}
	jump := make([]int, len(insns)) // successor index of a jump, -1 none
	for i, ins := range insns {
		jump[i] = -1
		op := ins.OpCode
		if ins.IsFunctionCall() {
			return all, 0 // bpf-to-bpf: pointers may go anywhere
		}
		if !op.Class().IsJump() || op.JumpOp() == asm.Call || op.JumpOp() == asm.Exit {
			continue
		}
		j, ok := ix.target(i)
		if !ok {
			return all, 0
		}
		jump[i] = j
		targets[raw[j]] = true
	}
	funcOf := make([]int, len(insns))
	lookups := knownLookups(spec, insns, raw, targets, funcOf)

	// p: the maps whose value pointer a register may hold; v: the maps
	// whose value (the old value or the sum of a fused add) it may hold,
	// which the program must not read: a slot's value is not the map's.
	type state struct{ p, v [11]uint64 }
	in := make([]*state, len(insns))
	in[0] = &state{}
	work := []int{0}
	flow := func(j int, s state) {
		if j < 0 || j >= len(insns) {
			return
		}
		if in[j] == nil {
			c := s
			in[j] = &c
			work = append(work, j)
			return
		}
		changed := false
		for r := range s.p {
			if in[j].p[r]|s.p[r] != in[j].p[r] || in[j].v[r]|s.v[r] != in[j].v[r] {
				in[j].p[r] |= s.p[r]
				in[j].v[r] |= s.v[r]
				changed = true
			}
		}
		if changed {
			work = append(work, j)
		}
	}
	for len(work) > 0 {
		i := work[len(work)-1]
		work = work[:len(work)-1]
		s := *in[i]
		ins := insns[i]
		op := ins.OpCode
		cls := op.Class()
		reads := func(r asm.Register) uint64 {
			if r <= asm.R9 {
				return s.p[r] | s.v[r]
			}
			return 0
		}
		set := func(r asm.Register, v uint64) {
			if r <= asm.R9 {
				s.p[r], s.v[r] = v, 0
			}
		}
		next, fall := -1, true
		if fused[raw[i]] && i+2 < len(insns) {
			ld, add := insns[i], insns[i+1]
			if rL, rR, ok := verifier.FusedShape(ld, add, insns[i+2]); ok {
				// one atomic add at the loaded address; the addend must
				// be no pointer or value of these maps, the address no value
				if add.OpCode.Source() == asm.RegSource && add.Src != rL {
					bad |= reads(add.Src)
				}
				bad |= s.v[ld.Src]
				m := s.p[ld.Src]
				set(rL, 0)
				set(rR, 0)
				s.v[rL], s.v[rR] = m, m
				flow(i+3, s)
				continue
			}
		}
		switch {
		case cls.IsJump() && op.JumpOp() == asm.Exit:
			fall = false // r0 is the return value, which the dispatch ignores
		case cls.IsJump() && op.JumpOp() == asm.Call:
			if k, ok := lookups[i]; ok {
				for r := asm.R1; r <= asm.R5; r++ {
					bad |= reads(r)
				}
				var v uint64
				if bit, ok := index[k.mapName]; ok {
					v = 1 << bit
					used |= v
				}
				s = state{}
				s.p[asm.R0] = v
				for r := asm.R6; r <= asm.R9; r++ {
					s.p[r], s.v[r] = in[i].p[r], in[i].v[r]
				}
				break
			}
			if ins.IsBuiltinCall() && pureHelper(ins.Constant) {
				for r := 1; r <= helperArgs(ins.Constant); r++ {
					bad |= reads(asm.Register(r))
				}
			} else if ins.IsBuiltinCall() && btLocalHelper(ins.Constant) {
				for r := asm.R1; r <= asm.R5; r++ {
					bad |= reads(r)
				}
			} else {
				bad = all // a map helper not inlined: its map and pointers are unknown here
			}
			for r := asm.R0; r <= asm.R5; r++ {
				set(r, 0)
			}
		case cls.IsJump():
			if op.Source() == asm.RegSource {
				bad |= reads(ins.Dst) | reads(ins.Src)
			} else if ins.Constant != 0 {
				bad |= reads(ins.Dst)
			} else if op.JumpOp() != asm.Ja {
				bad |= s.v[ins.Dst] // a pointer may be tested for NULL, a value not read
			}
			next = jump[i]
			fall = op.JumpOp() != asm.Ja
		case cls.IsALU():
			if op.ALUOp() == asm.Mov && op.Source() == asm.RegSource {
				if ins.Src <= asm.R9 && ins.Dst <= asm.R9 {
					s.p[ins.Dst], s.v[ins.Dst] = s.p[ins.Src], s.v[ins.Src]
				} else {
					set(ins.Dst, 0)
				}
				break
			}
			if op.Source() == asm.RegSource {
				bad |= reads(ins.Src)
			}
			if op.ALUOp() != asm.Mov {
				bad |= reads(ins.Dst)
			}
			set(ins.Dst, 0)
		case cls == asm.LdClass:
			set(ins.Dst, 0)
		case cls == asm.LdXClass:
			bad |= reads(ins.Src)
			set(ins.Dst, 0)
		case cls == asm.StClass:
			bad |= reads(ins.Dst)
		case cls == asm.StXClass && op.Mode() == asm.AtomicMode:
			bad |= reads(ins.Src) // the address (Dst) may be a map value: that is the point
			if op.AtomicOp() != asm.AddAtomic {
				// only a plain add sums the same in any slot: an exchange,
				// an and/or/xor, or a fetch whose old value the program
				// uses see the slot's other writers
				bad |= reads(ins.Dst)
			}
			switch op.AtomicOp() {
			case asm.CmpXchg:
				bad |= reads(asm.R0)
				set(asm.R0, 0)
			case asm.FetchAdd, asm.FetchAnd, asm.FetchOr, asm.FetchXor, asm.Xchg:
				set(ins.Src, 0)
			}
		case cls == asm.StXClass:
			bad |= reads(ins.Dst) | reads(ins.Src)
		default:
			return all, 0
		}
		if next >= 0 {
			flow(next, s)
		}
		if fall && i+1 < len(insns) {
			flow(i+1, s)
		}
	}
	return bad, used
}

// btLocalHelper: a bpftime helper the translator emits as the thread's own
// register and stack work (its indices, the clock) or drops (printk): it
// touches no map. Its arguments (up to five) count as reads.
func btLocalHelper(id int64) bool {
	switch id {
	case abi.BtGlobaltimer, abi.BtBlockIdx, abi.BtBlockDim, abi.BtThreadIdx, abi.BtGridDim,
		abi.BtSmID, abi.BtWarpID, abi.BtLaneID, abi.BtPuts, abi.BtTracePrintk:
		return true
	}
	return false
}
