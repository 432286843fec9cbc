package ptx

import (
	"fmt"
	"sort"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/gpubpf/abi"
)

// MapCall is a bpf_map_lookup_elem or bpf_map_update_elem call of a
// program's main function on an array-like map (ARRAY, PER_WARP,
// per-thread, bpftime's GPU arrays: a 4-byte key) that the call's basic
// block loads into r1, as the translator's inline lookups find them.
type MapCall struct {
	Map    string
	Helper int32 // abi.HelperMapLookupElem or abi.HelperMapUpdateElem
	// Key: the u32 the stack slot at r2 holds, when KeyConst (a constant
	// stored there earlier in the basic block).
	Key      uint32
	KeyConst bool
}

// MapCalls lists the known-map lookup and update calls of program prog of
// spec (any section: a host program of a bpftime object too), in
// instruction order. A program with bpf-to-bpf calls gives none (pointers
// may go anywhere).
func MapCalls(spec *ebpf.CollectionSpec, prog string) ([]MapCall, error) {
	ps, ok := spec.Programs[prog]
	if !ok {
		return nil, fmt.Errorf("no program %q", prog)
	}
	insns := ps.Instructions
	ix := indexInsns(insns)
	targets := map[int]bool{}
	for i, ins := range insns {
		op := ins.OpCode
		if ins.IsFunctionCall() {
			return nil, nil
		}
		if !op.Class().IsJump() || op.JumpOp() == asm.Call || op.JumpOp() == asm.Exit {
			continue
		}
		j, ok := ix.target(i)
		if !ok {
			return nil, nil
		}
		targets[ix.raw[j]] = true
	}
	found := knownLookups(spec, insns, ix.raw, targets, make([]int, len(insns)))
	idx := make([]int, 0, len(found))
	for i := range found {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var out []MapCall
	for _, i := range idx {
		k := found[i]
		if h := int32(insns[i].Constant); h == abi.HelperMapLookupElem || h == abi.HelperMapUpdateElem {
			out = append(out, MapCall{Map: k.mapName, Helper: h, Key: k.keyVal, KeyConst: k.keyConst})
		}
	}
	return out, nil
}
