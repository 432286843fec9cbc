package pools

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Env names Allocate sets in a container: the GPUs it is given.
const (
	EnvCUDAVisibleDevices   = "CUDA_VISIBLE_DEVICES"
	EnvNVIDIAVisibleDevices = "NVIDIA_VISIBLE_DEVICES" // read by the NVIDIA container toolkit
	EnvCUDADeviceOrder      = "CUDA_DEVICE_ORDER"      // PCI_BUS_ID: CUDA's ordinals in NVML's order
)

// DeviceID is one unit of one GPU's memory: "gpu<GPU>-m<Unit>", the unit
// written with at least three digits ("gpu1-m017").
type DeviceID struct {
	GPU  int
	Unit int
}

func (d DeviceID) String() string { return fmt.Sprintf("gpu%d-m%03d", d.GPU, d.Unit) }

// ErrDeviceID is wrapped by ParseDeviceID's errors.
var ErrDeviceID = errors.New("not a gpuext device id")

// ParseDeviceID reads a device id as String writes it.
func ParseDeviceID(s string) (DeviceID, error) {
	bad := func() (DeviceID, error) { return DeviceID{}, fmt.Errorf("%w: %q (want gpu<N>-m<NNN>)", ErrDeviceID, s) }
	if len(s) > 32 {
		return bad()
	}
	rest, ok := strings.CutPrefix(s, "gpu")
	if !ok {
		return bad()
	}
	g, u, ok := strings.Cut(rest, "-m")
	if !ok || len(u) < 3 || !digits(g) || !digits(u) || (len(g) > 1 && g[0] == '0') {
		return bad()
	}
	gi, err1 := strconv.Atoi(g)
	ui, err2 := strconv.Atoi(u)
	if err1 != nil || err2 != nil || (DeviceID{gi, ui}).String() != s {
		return bad()
	}
	return DeviceID{GPU: gi, Unit: ui}, nil
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// DeviceIDs lists every device of the node, GPU by GPU.
func (s Spec) DeviceIDs() []DeviceID {
	var ids []DeviceID
	for _, g := range s.GPUs {
		for u := 0; u < s.Units(g); u++ {
			ids = append(ids, DeviceID{GPU: g.Index, Unit: u})
		}
	}
	return ids
}

// Has says whether d is one of the node's devices.
func (s Spec) Has(d DeviceID) bool {
	for _, g := range s.GPUs {
		if g.Index == d.GPU {
			return d.Unit >= 0 && d.Unit < s.Units(g)
		}
	}
	return false
}

// Share is the memory a container (or a pod) holds on one GPU.
type Share struct {
	GPU   int // NVML index of the GPU
	Units int
	Bytes uint64
}

// Shares groups device ids by GPU, in GPU index order: the order of the
// container's device ordinals (Allocate lists its GPUs in that order).
// Every id must be one of the node's; a repeated id counts once.
func (s Spec) Shares(ids []string) ([]Share, error) {
	units := map[int]map[int]bool{}
	for _, id := range ids {
		d, err := ParseDeviceID(id)
		if err != nil {
			return nil, err
		}
		if !s.Has(d) {
			return nil, fmt.Errorf("%w: %q is not a device of this node", ErrDeviceID, id)
		}
		if units[d.GPU] == nil {
			units[d.GPU] = map[int]bool{}
		}
		units[d.GPU][d.Unit] = true
	}
	out := make([]Share, 0, len(units))
	for g, us := range units {
		out = append(out, Share{GPU: g, Units: len(us), Bytes: uint64(len(us)) * s.Unit})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GPU < out[j].GPU })
	return out, nil
}

// GPU returns the node's GPU of that index.
func (s Spec) GPU(index int) (GPU, bool) {
	for _, g := range s.GPUs {
		if g.Index == index {
			return g, true
		}
	}
	return GPU{}, false
}

// Preferred picks size devices out of available, keeping must: a
// container's units on as few GPUs as possible. The GPUs of must come
// first; then the GPU with the fewest free units that still holds the
// rest (best fit: a large GPU's free memory stays whole for a large
// request); when no GPU holds it, the GPUs with the most free units first.
// Within a GPU the lowest units are taken. Unknown ids are ignored.
func Preferred(available, must []string, size int) []string {
	byGPU := map[int][]DeviceID{}
	taken := map[string]bool{}
	var out []string
	for _, id := range must {
		if d, err := ParseDeviceID(id); err == nil && !taken[id] {
			taken[id] = true
			out = append(out, id)
			byGPU[d.GPU] = byGPU[d.GPU] // the GPU of a must id is preferred
		}
	}
	mustGPUs := map[int]bool{}
	for g := range byGPU {
		mustGPUs[g] = true
	}
	for _, id := range available {
		if d, err := ParseDeviceID(id); err == nil && !taken[id] {
			taken[id] = true
			byGPU[d.GPU] = append(byGPU[d.GPU], d)
		}
	}
	for g := range byGPU {
		sort.Slice(byGPU[g], func(i, j int) bool { return byGPU[g][i].Unit < byGPU[g][j].Unit })
	}
	take := func(g, n int) {
		for _, d := range byGPU[g] {
			if n == 0 {
				break
			}
			out = append(out, d.String())
			n--
		}
		byGPU[g] = nil
	}
	need := size - len(out)
	// the GPUs of must, most free first
	for need > 0 {
		g := pick(byGPU, func(g int) bool { return mustGPUs[g] }, need)
		if g < 0 {
			break
		}
		n := min(need, len(byGPU[g]))
		take(g, n)
		need -= n
	}
	for need > 0 {
		g := pick(byGPU, func(int) bool { return true }, need)
		if g < 0 {
			break
		}
		n := min(need, len(byGPU[g]))
		take(g, n)
		need -= n
	}
	return out
}

// pick is the GPU (among those ok says) with the fewest free units that
// still hold need, else the one with the most; -1 when none has any.
func pick(byGPU map[int][]DeviceID, ok func(int) bool, need int) int {
	best, bestFree, fits := -1, 0, false
	for g, ds := range byGPU {
		free := len(ds)
		if free == 0 || !ok(g) {
			continue
		}
		switch f := free >= need; {
		case best < 0,
			f && !fits,
			f && fits && (free < bestFree || free == bestFree && g < best),
			!f && !fits && (free > bestFree || free == bestFree && g < best):
			best, bestFree, fits = g, free, f
		}
	}
	return best
}

// VisibleEnv is the env that binds a container to the GPUs of its shares
// when CDI is off (AllocateEnv), in GPU index order (its device ordinals):
// UUIDs where the node's GPUs have them, else NVML indices with
// CUDA_DEVICE_ORDER=PCI_BUS_ID, so CUDA's ordinals follow NVML's.
func (s Spec) VisibleEnv(shares []Share) map[string]string {
	if uuids, ok := s.uuids(shares); ok {
		list := strings.Join(uuids, ",")
		return map[string]string{EnvCUDAVisibleDevices: list, EnvNVIDIAVisibleDevices: list}
	}
	names := make([]string, 0, len(shares))
	for _, sh := range shares {
		names = append(names, strconv.Itoa(sh.GPU))
	}
	list := strings.Join(names, ",")
	return map[string]string{EnvCUDAVisibleDevices: list, EnvNVIDIAVisibleDevices: list, EnvCUDADeviceOrder: "PCI_BUS_ID"}
}
