package ptx

import (
	"sort"

	"github.com/cilium/ebpf"

	"github.com/gpuext/gpuext/gpubpf/abi"
)

// MaxStripedBytes bounds the device memory of an array StripeArrays gives
// a copy per warp slot (abi.MapWarpSlots copies of its values): 32 u64
// values, a histogram's bins.
const MaxStripedBytes = 4 << 20

// StripeArrays turns the bpftime GPU arrays of spec (GPU_ARRAY_MAP,
// GPU_KERNEL_SHARED_ARRAY_MAP) of u64 values that progs only add to (an
// atomic add, or a load, add, store the translator makes one, fused per
// program as verifier.Result.FusedAdds says, whose loaded and summed
// values the program does not read afterwards) into per-warp maps: one
// copy of the values per warp slot, which the host sums, as it sums
// launch-count's counters. Every lane of a bpftime program runs it, and on
// one array every warp of a launch adds to the same bins: on the H200 one
// address takes about one atomic a clock, which a launch of millions of
// threads waits on. keep names the maps that stay as they are (the host
// writes them: a launch-time hostWrite). The map specs are replaced by
// copies (the caller's stay as they are); it returns the maps it changed,
// sorted.
func StripeArrays(spec *ebpf.CollectionSpec, progs []string, fused map[string][]int, keep func(string) bool) []string {
	striped := onlyAddedTo(spec, progs, fused, func(name string, ms *ebpf.MapSpec) bool {
		t := uint32(ms.Type)
		return (t == abi.BtMapGPUArray || t == abi.BtMapKernelShared) && ms.ValueSize == 8 && ms.MaxEntries > 0 &&
			uint64(ms.MaxEntries)*8*abi.MapWarpSlots <= MaxStripedBytes && (keep == nil || !keep(name))
	})
	var out []string
	for name := range striped {
		c := spec.Maps[name].Copy()
		c.Type = ebpf.PerCPUArray
		spec.Maps[name] = c
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}
