package ptx

import (
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/devrt/probe"
)

// atomicOnlyMaps returns the per-warp maps of a module whose values every
// program touches only through atomics on the pointer an inlined lookup
// returned (launch-count's and launch-stats' counters). A per-warp map's
// value is the sum of its slots, and the slot (%smid*64 + %warpid) exists
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
func atomicOnlyMaps(spec *ebpf.CollectionSpec, progs []string) map[string]bool {
	var warpMaps []string
	index := map[string]int{}
	for name, ms := range spec.Maps {
		if l, err := SpecLayout(ms); err == nil && l.Type == probe.MapPerWarp && len(warpMaps) < 64 {
			index[name] = len(warpMaps)
			warpMaps = append(warpMaps, name)
		}
	}
	if len(warpMaps) == 0 {
		return nil
	}
	var bad, used uint64
	all := uint64(1)<<len(warpMaps) - 1
	for _, name := range progs {
		ps := spec.Programs[name]
		if ps == nil {
			return nil
		}
		b, u := atomicOnlyProg(spec, ps.Instructions, index, all)
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

// atomicOnlyProg: the per-warp maps (bit masks over index) a program
// disqualifies and those it looks up.
func atomicOnlyProg(spec *ebpf.CollectionSpec, insns asm.Instructions, index map[string]int, all uint64) (bad, used uint64) {
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

	type state [11]uint64
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
		for r := range s {
			if in[j][r]|s[r] != in[j][r] {
				in[j][r] |= s[r]
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
				return s[r]
			}
			return 0
		}
		set := func(r asm.Register, v uint64) {
			if r <= asm.R9 {
				s[r] = v
			}
		}
		next, fall := -1, true
		switch {
		case cls.IsJump() && op.JumpOp() == asm.Exit:
			fall = false // r0 is the return value, which the dispatch ignores
		case cls.IsJump() && op.JumpOp() == asm.Call:
			if k, ok := lookups[i]; ok {
				for r := asm.R1; r <= asm.R5; r++ {
					bad |= s[r]
				}
				var v uint64
				if bit, ok := index[k.mapName]; ok {
					v = 1 << bit
					used |= v
				}
				s = state{}
				s[asm.R0] = v
				for r := asm.R6; r <= asm.R9; r++ {
					s[r] = in[i][r]
				}
				break
			}
			if ins.IsBuiltinCall() && pureHelper(ins.Constant) {
				for r := 1; r <= helperArgs(ins.Constant); r++ {
					bad |= s[r]
				}
			} else {
				bad = all // a map helper not inlined: its map and pointers are unknown here
			}
			for r := asm.R0; r <= asm.R5; r++ {
				s[r] = 0
			}
		case cls.IsJump():
			if op.Source() == asm.RegSource {
				bad |= reads(ins.Dst) | reads(ins.Src)
			} else if ins.Constant != 0 {
				bad |= reads(ins.Dst)
			}
			next = jump[i]
			fall = op.JumpOp() != asm.Ja
		case cls.IsALU():
			if op.ALUOp() == asm.Mov && op.Source() == asm.RegSource {
				set(ins.Dst, reads(ins.Src))
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
				bad |= s[asm.R0]
				s[asm.R0] = 0
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
