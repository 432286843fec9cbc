package programs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/ptx"
	"github.com/gpuext/gpuext/gpubpf/verifier"
)

// Describe is a starting descriptor for a probe directory entry NAME.json
// from a BPF object (an unmodified bpftime GPU program, say): every
// program at a device attach point that passes the verifier (the others in
// Refused, with their reasons; none passing is the error naming each), and
// a view of each map a view can
// show as the loader maps it (a per-thread view of a per-thread array,
// counters of an array of u64 values, a hash view with the key and value
// as bytes, or u64 values, a records view of a ring buffer with the record
// as bytes, at most MaxFieldBytes of them), at most MaxPerThreadFields entries named e0, e1, .... A map
// no device program uses (one only a host uprobe of the object reads) gets
// no view: the module does not hold it. hostWrites follow bpftime's
// launchlate rule (describeHostWrites). The operator names the fields;
// LoadDir checks the result as any descriptor.
func Describe(name, object string, obj []byte) (Probe, error) {
	p := Probe{Name: name, Description: "generated from " + object + " (gpuext probe-describe): name the fields", Object: object}
	spec, err := parseObject(object, obj)
	if err != nil {
		return p, err
	}
	// the verdicts first: a program the verifier refuses (or at an attach
	// point gpuext does not support) gets no view, and when none runs the
	// error says why, not that no map can be shown
	if err := p.selectPrograms(spec); err != nil {
		return p, err
	}
	used := mapsUsed(spec, p.Programs)
	for _, mn := range slices.Sorted(maps.Keys(spec.Maps)) {
		if !used[mn] {
			continue
		}
		if v, ok := describeMap(spec.Maps[mn]); ok {
			p.Views = append(p.Views, v)
		}
	}
	p.HostWrites = describeHostWrites(spec, p.Programs)
	if len(p.Views) == 0 {
		return p, catalogErr("views", "%s: the programs that run (%s) use no map a view can show", object, strings.Join(p.Programs, ", "))
	}
	return p, p.check(spec)
}

func describeMap(m *ebpf.MapSpec) (View, bool) {
	dm, err := abi.DeviceMapOf(uint32(m.Type), m.ValueSize, m.MaxEntries, m.MapExtra)
	if err != nil {
		return View{}, false
	}
	names := func(n uint32) []string {
		var out []string
		for i := uint32(0); i < min(n, MaxPerThreadFields); i++ {
			out = append(out, fmt.Sprintf("e%d", i))
		}
		return out
	}
	blob := func(n string, size uint32) []Field {
		if size == 8 {
			return []Field{{Name: n, Type: FieldU64}}
		}
		return []Field{{Name: n, Type: FieldBytes, Size: int(size)}}
	}
	v := View{Map: m.Name}
	switch {
	case dm.Type == abi.MapPerThread && m.ValueSize == 8:
		v.Kind, v.Fields = ViewPerThread, names(m.MaxEntries)
	case (dm.Type == abi.MapArray || dm.Type == abi.MapPerWarp) && m.ValueSize == 8:
		v.Kind, v.Fields = ViewCounters, names(m.MaxEntries)
	case dm.Type == abi.MapHash && m.KeySize <= MaxFieldBytes && m.ValueSize <= MaxFieldBytes:
		v.Kind, v.Key, v.Value = ViewHash, blob("key", m.KeySize), blob("value", m.ValueSize)
	case dm.Type == abi.MapRingbuf && dm.PerLane:
		// bpftime's value_size is the largest record, not the size of the
		// ones its programs output: a record of up to MaxFieldBytes counts
		// every record (Count), and the operator sets the real layout.
		v.Kind, v.Record = ViewRecords, blob("record", min(m.ValueSize, MaxFieldBytes))
	default:
		return View{}, false
	}
	return v, true
}

// describeHostWrites applies bpftime's launchlate rule: an element K of an
// array of u64 that a device program looks up with the constant key K and
// no device program writes, which a host program of the object (bpftime
// runs its uprobe on cudaLaunchKernel) updates at K and which reads
// bpf_ktime_get_ns, holds the host's time of the launch: a launch-time
// hostWrite. Where the host's key is not known (its constant stored before
// a branch) the device's one constant key of the map is taken; several:
// none. Nothing else is inferred (a clock offset the loader writes is the
// operator's to add). An object the verifier refuses gets none.
func describeHostWrites(spec *ebpf.CollectionSpec, progs []string) []HostWrite {
	rep, err := verifier.VerifyCollection(spec)
	if err != nil {
		return nil
	}
	type elem struct {
		m string
		k uint32
	}
	read := map[elem]bool{}
	readKeys := map[string][]uint32{}
	for _, pn := range progs {
		calls, _ := ptx.MapCalls(spec, pn)
		for _, c := range calls {
			if c.Helper == abi.HelperMapLookupElem && c.KeyConst && !read[elem{c.Map, c.Key}] {
				read[elem{c.Map, c.Key}] = true
				readKeys[c.Map] = append(readKeys[c.Map], c.Key)
			}
		}
	}
	var out []HostWrite
	for _, pn := range slices.Sorted(maps.Keys(spec.Programs)) {
		ps := spec.Programs[pn]
		if _, dev := abi.ParseSection(ps.SectionName); dev || !callsHelper(ps, abi.HelperKtimeGetNs) {
			continue
		}
		calls, _ := ptx.MapCalls(spec, pn)
		for _, c := range calls {
			if !c.KeyConst && len(readKeys[c.Map]) == 1 {
				c.Key, c.KeyConst = readKeys[c.Map][0], true
			}
			e := elem{c.Map, c.Key}
			hw := HostWrite{Map: c.Map, Key: c.Key, Value: abi.HostLaunchTime}
			if c.Helper != abi.HelperMapUpdateElem || !c.KeyConst || !read[e] || slices.Contains(rep.Written, c.Map) ||
				slices.Contains(out, hw) || len(out) == MaxHostWrites {
				continue
			}
			if dm, err := abi.DeviceMapOf(uint32(spec.Maps[c.Map].Type), spec.Maps[c.Map].ValueSize, spec.Maps[c.Map].MaxEntries, spec.Maps[c.Map].MapExtra); err != nil ||
				dm.Type != abi.MapArray || spec.Maps[c.Map].ValueSize != 8 {
				continue
			}
			out = append(out, hw)
		}
	}
	return out
}

func callsHelper(ps *ebpf.ProgramSpec, h int64) bool {
	for _, ins := range ps.Instructions {
		if ins.IsBuiltinCall() && ins.Constant == h {
			return true
		}
	}
	return false
}

// DescriptorJSON is p as a probe directory's NAME.json.
func DescriptorJSON(p Probe) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	_ = enc.Encode(p)
	return b.Bytes()
}
