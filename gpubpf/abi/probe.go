// Package probe holds what every part of the device-side eBPF pipeline
// shares: attach points, helper numbers, the probe context, device map
// layouts and the module manifest. The numbers and the dispatch names are
// generated (abi_gen.go, by gen.go) from the DEVICE PROBES section of
// kmod/include/gpuext_abi.h and from devrt/lib/ptxpatch.h, the headers the
// probes and the interposer are built with; the pipeline itself is
// described in docs/device-probes.md.
//
//	ELF (clang -target bpf) -> verifier -> ptx translator -> module.ptx + manifest.json
//	                                                   -> interposer splices at image load (C)
package abi

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Attach is where in a GPU kernel a probe runs.
type Attach uint32

const (
	KernelEntry Attach = attachKernelEntry // first instruction of the kernel, every thread
	KernelExit  Attach = attachKernelExit  // before each ret/exit of the kernel, every thread
)

// ELF section names of the attach points.
const (
	SecKernelEntry = secKernelEntry
	SecKernelExit  = secKernelExit
)

func (a Attach) String() string {
	switch a {
	case KernelEntry:
		return "kernel_entry"
	case KernelExit:
		return "kernel_exit"
	}
	return fmt.Sprintf("attach(%d)", uint32(a))
}

// Section prefixes of bpftime's convention: the kernel is named in the
// section, "kprobe/_Z9vectorAddPKfS0_Pf" (entry of that .entry) and
// "kretprobe/..." (its exit).
const (
	SecKprobe    = secKprobe
	SecKretprobe = secKretprobe
)

// AnyKernel in a bpftime-style section (kprobe/*, kretprobe/*) is every
// probed kernel: '*' is in no PTX identifier.
const AnyKernel = "*"

// Section is what an ELF section name says about a program.
type Section struct {
	Attach Attach
	// Kernel: the .entry the program is limited to ("" = every probed
	// kernel). Set by the bpftime aliases only.
	Kernel string
	// Bpftime: a bpftime-style program (kprobe/KERNEL, kretprobe/KERNEL):
	// every thread is an event, bpftime's helper numbers and GPU map types
	// (docs/device-probes.md).
	Bpftime bool
}

// ParseSection maps an ELF section name to its attach point: gpuext's own
// sections, or bpftime's aliases kprobe/KERNEL and kretprobe/KERNEL (a
// KERNEL that is empty or holds a space, '/' or control byte is not one).
// KERNEL "*" (AnyKernel, no PTX identifier) is gpuext's: a bpftime-style
// program that runs in every probed kernel; a descriptor's "retarget"
// gives an unchanged object's programs that section.
func ParseSection(sec string) (Section, bool) {
	if _, refused := RefusedSection(sec); refused {
		return Section{}, false
	}
	switch strings.TrimSuffix(sec, "/") {
	case SecKernelEntry:
		return Section{Attach: KernelEntry}, true
	case SecKernelExit:
		return Section{Attach: KernelExit}, true
	}
	for _, a := range []struct {
		prefix string
		at     Attach
	}{{SecKprobe, KernelEntry}, {SecKretprobe, KernelExit}} {
		k, ok := strings.CutPrefix(sec, a.prefix)
		if !ok {
			continue
		}
		if k == AnyKernel {
			return Section{Attach: a.at, Bpftime: true}, true
		}
		if k == "" || strings.ContainsFunc(k, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == '/' || r == '#' }) {
			return Section{}, false
		}
		return Section{Attach: a.at, Kernel: k, Bpftime: true}, true
	}
	return Section{}, false
}

// MemCapture is the kernel name bpftime gives its memory-access attach
// point: kprobe/__memcapture runs at every load and store of every kernel
// (bpftime's memcapture pass), not at the entry of a kernel of that name.
const MemCapture = "__memcapture"

// RefusedSection says why a section of bpftime's that looks like a device
// attach point is not one here, so a loader can name the reason instead of
// running the program somewhere it was not written for. Today that is
// bpftime's memory-access point (MemCapture): gpuext splices probes at a
// kernel's entry and exit only and does not instrument every load and
// store, so reading it as the entry of a kernel named __memcapture would
// run it at the wrong place (or never).
func RefusedSection(sec string) (string, bool) {
	for _, prefix := range []string{SecKprobe, SecKretprobe} {
		if k, ok := strings.CutPrefix(sec, prefix); ok && strings.TrimSuffix(k, "/") == MemCapture {
			return fmt.Sprintf("section %q is bpftime's memory-access attach point (it runs at every load and store of every kernel); "+
				"gpuext instruments a kernel's entry and exit only, not every load and store, so it does not run it", sec), true
		}
	}
	return "", false
}

// AttachOfSection maps an ELF section name to its attach point (ParseSection).
func AttachOfSection(sec string) (Attach, bool) {
	s, ok := ParseSection(sec)
	return s.Attach, ok
}

// Helper numbers (the imm of a BPF call). Kernel numbers where the kernel
// has the helper; device-only ones from HelperBase.
const (
	HelperMapLookupElem  = phMapLookupElem
	HelperMapUpdateElem  = phMapUpdateElem
	HelperMapDeleteElem  = phMapDeleteElem
	HelperKtimeGetNs     = phKtimeGetNs     // %globaltimer on the device
	HelperSmpProcessorID = phSmpProcessorID // %smid on the device
	HelperRingbufOutput  = phRingbufOutput
	HelperBase           = phBase
	HelperThreadIdx      = phThreadIdx // (dim) -> %tid.{x,y,z}
	HelperBlockIdx       = phBlockIdx  // (dim) -> %ctaid
	HelperBlockDim       = phBlockDim  // (dim) -> %ntid
	HelperGridDim        = phGridDim   // (dim) -> %nctaid
	HelperWarpID         = phWarpID    // linear thread index in block / 32
	HelperLaneID         = phLaneID    // %laneid
	HelperSmID           = phSmID      // %smid
	HelperGlobaltimer    = phGlobaltimer
	HelperBlockLinearID  = phBlockLinearID
	HelperThreadLinearID = phThreadLinearID
	HelperGlobalThreadID = phGlobalThreadID // linear thread index in the launch
)

// bpftime's GPU helper numbers and the host helpers a bpftime-style
// program may call (docs/device-probes.md says what each does here).
const (
	BtPuts        = btPuts
	BtGlobaltimer = btGlobaltimer
	BtBlockIdx    = btBlockIdx
	BtBlockDim    = btBlockDim
	BtThreadIdx   = btThreadIdx
	BtMembar      = btMembar
	BtExit        = btExit
	BtGridDim     = btGridDim
	BtSmID        = btSmID
	BtWarpID      = btWarpID
	BtLaneID      = btLaneID
	BtTracePrintk = btTracePrintk
	BtPidTgid     = btPidTgid
	BtPerfOutput  = btPerfOutput
)

// BpftimeHelperNames names the helpers a bpftime-style program may call
// beyond HelperNames (bpftime's names).
var BpftimeHelperNames = map[int32]string{
	BtPuts:        "ebpf_puts",
	BtGlobaltimer: "bpf_get_globaltimer",
	BtBlockIdx:    "bpf_get_block_idx",
	BtBlockDim:    "bpf_get_block_dim",
	BtThreadIdx:   "bpf_get_thread_idx",
	BtMembar:      "bpf_gpu_membar",
	BtGridDim:     "bpf_get_grid_dim",
	BtSmID:        "bpf_get_sm_id",
	BtWarpID:      "bpf_get_warp_id",
	BtLaneID:      "bpf_get_lane_id",
	BtTracePrintk: "bpf_trace_printk",
	BtPidTgid:     "bpf_get_current_pid_tgid",
	BtPerfOutput:  "bpf_perf_event_output",
}

// SymPidTgid: .visible .global .u64 the interposer may set after load;
// what bpf_get_current_pid_tgid returns on the device (0 until set).
const SymPidTgid = symPidTgid

// HelperNames names every helper the device runtime implements.
var HelperNames = map[int32]string{
	HelperMapLookupElem:  "map_lookup_elem",
	HelperMapUpdateElem:  "map_update_elem",
	HelperMapDeleteElem:  "map_delete_elem",
	HelperKtimeGetNs:     "ktime_get_ns",
	HelperSmpProcessorID: "get_smp_processor_id",
	HelperRingbufOutput:  "ringbuf_output",
	HelperThreadIdx:      "gpuext_thread_idx",
	HelperBlockIdx:       "gpuext_block_idx",
	HelperBlockDim:       "gpuext_block_dim",
	HelperGridDim:        "gpuext_grid_dim",
	HelperWarpID:         "gpuext_warp_id",
	HelperLaneID:         "gpuext_lane_id",
	HelperSmID:           "gpuext_sm_id",
	HelperGlobaltimer:    "gpuext_globaltimer",
	HelperBlockLinearID:  "gpuext_block_linear_id",
	HelperThreadLinearID: "gpuext_thread_linear_id",
	HelperGlobalThreadID: "gpuext_global_thread_id",
}

// Ctx is struct gpuext_probe_ctx: what r1 points at in a probe (its
// offsets are checked against the header's by abi_test.go).
type Ctx struct {
	KernelID uint64 // FNV-1a 64 of the .entry name
	TenantID uint32
	Attach   uint32
	LaunchNs uint64 // host CLOCK_REALTIME at launch; 0 unless requested
}

// CtxSize is sizeof(struct gpuext_probe_ctx).
const CtxSize = ctxSize

// KernelID is the id the patcher gives a .entry: FNV-1a 64 of its name.
func KernelID(entry string) uint64 {
	h := fnv64Offset
	for i := 0; i < len(entry); i++ {
		h ^= uint64(entry[i])
		h *= fnv64Prime
	}
	return h
}

// MapType is enum gpuext_dmap_type.
type MapType uint32

const (
	MapArray   MapType = dmapArray
	MapHash    MapType = dmapHash
	MapPerWarp MapType = dmapPerWarp
	MapRingbuf MapType = dmapRingbuf
	// MapPerThread: one row of max_entries values per thread of the
	// launch (GPUEXT_DMAP_PER_THREAD).
	MapPerThread MapType = dmapPerThread
)

// Per-thread map sizing: rows without map_extra, rows at most.
const (
	MapThreadSlots    = dmapThreadSlots
	MapMaxThreadSlots = dmapMaxThreadSlots
)

// Kernel map types (the BTF "type" of a map) the device holds beyond the
// kernel's own: gpuext's per-thread array, and bpftime's GPU map types.
const (
	MapTypePerThread   = mapTypePerThread
	BtMapGPUHash       = btMapGPUHash
	BtMapPerThread     = btMapPerThread
	BtMapGPUArray      = btMapGPUArray
	BtMapKernelShared  = btMapKernelShared
	BtMapPerThreadHost = btMapPerThreadHost
	BtMapGPUArrayHost  = btMapGPUArrayHost
	BtMapGPURingbuf    = btMapGPURingbuf
	BtRingbufThreads   = btRingbufThreads
	kernelArray        = 2  // BPF_MAP_TYPE_ARRAY
	kernelHash         = 1  // BPF_MAP_TYPE_HASH
	kernelPerCPUArray  = 6  // BPF_MAP_TYPE_PERCPU_ARRAY
	kernelRingbuf      = 27 // BPF_MAP_TYPE_RINGBUF
)

// DeviceMap is what a map of kernel (BTF) type t becomes on the device:
// its device type and the max_entries / slots of probe.Layout. perLane: a
// ring buffer every lane may write its own records to (bpftime's GPU
// ring buffer). extra is the map's map_extra (per-thread rows).
type DeviceMap struct {
	Type       MapType
	MaxEntries uint32 // RINGBUF: data bytes
	Slots      uint32 // PER_THREAD: rows
	PerLane    bool
}

// DeviceMapOf maps a kernel map type onto the device's; an error names a
// type the device does not hold or sizes it cannot.
func DeviceMapOf(t, valueSize, maxEntries uint32, extra uint64) (DeviceMap, error) {
	switch t {
	case kernelArray, BtMapGPUArray, BtMapKernelShared, BtMapGPUArrayHost:
		return DeviceMap{Type: MapArray, MaxEntries: maxEntries}, nil
	case kernelHash, BtMapGPUHash:
		return DeviceMap{Type: MapHash, MaxEntries: maxEntries}, nil
	case kernelPerCPUArray:
		return DeviceMap{Type: MapPerWarp, MaxEntries: maxEntries}, nil
	case kernelRingbuf:
		return DeviceMap{Type: MapRingbuf, MaxEntries: maxEntries}, nil
	case MapTypePerThread, BtMapPerThreadHost:
		slots := uint64(MapThreadSlots)
		if extra != 0 {
			if extra > MapMaxThreadSlots {
				return DeviceMap{}, fmt.Errorf("per-thread map: map_extra %d rows, at most %d", extra, MapMaxThreadSlots)
			}
			slots = extra
		}
		return DeviceMap{Type: MapPerThread, MaxEntries: maxEntries, Slots: uint32(slots)}, nil
	case BtMapGPURingbuf:
		if maxEntries == 0 || valueSize == 0 {
			return DeviceMap{}, fmt.Errorf("GPU ring buffer: max_entries %d, value size %d: both must be set", maxEntries, valueSize)
		}
		bytes := uint64(maxEntries) * (8 + uint64(round8(min(valueSize, MaxMapData)))) * BtRingbufThreads
		if bytes > MaxMapData {
			return DeviceMap{}, fmt.Errorf("GPU ring buffer: %d records of %d bytes for %d threads need %d bytes, more than 1 GiB", maxEntries, valueSize, BtRingbufThreads, bytes)
		}
		return DeviceMap{Type: MapRingbuf, MaxEntries: uint32(bytes), PerLane: true}, nil
	}
	return DeviceMap{}, fmt.Errorf("map type %d is not one the device holds (Array, Hash, PerCPUArray, RingBuf, per-thread %d, or bpftime's GPU types)", t, MapTypePerThread)
}

func (t MapType) String() string {
	switch t {
	case MapArray:
		return "array"
	case MapHash:
		return "hash"
	case MapPerWarp:
		return "per-warp"
	case MapRingbuf:
		return "ringbuf"
	case MapPerThread:
		return "per-thread"
	}
	return fmt.Sprintf("maptype(%d)", uint32(t))
}

// Device map layout constants (struct gpuext_dmap).
const (
	MapHdrSize   = dmapHdrSize
	MapWarpSlots = dmapWarpSlots
	// MapNoRowStripes and MapNoRowStripe: a per-thread map counts lookups
	// by threads past its rows in MapNoRowStripes u64s, MapNoRowStripe
	// bytes apart, after the rows (a warp adds to stripe %smid %
	// MapNoRowStripes); the count is their sum (PerThreadNoRow).
	MapNoRowStripes = dmapNoRowStripes
	MapNoRowStripe  = dmapNoRowStripe
	// MapStripesSize is the bytes the stripes take: the last one ends 8
	// bytes into its MapNoRowStripe.
	MapStripesSize = (MapNoRowStripes-1)*MapNoRowStripe + 8
)

// RingStripesOffset is where, in a ring's data, its striped drop counts
// begin: after [u64 head][u64 dropped] and the records' max_entries bytes,
// 8-aligned. The helper library counts a record that does not fit in
// dropped; the translator's inline check of a full ring adds for a warp to
// the stripe of its SM (%smid % MapNoRowStripes, MapNoRowStripe bytes
// apart). RingDropped is the sum.
func RingStripesOffset(maxEntries uint32) uint64 { return 16 + uint64(round8(maxEntries)) }

// RingDropped is the count of records a ring of layout l dropped, from its
// data (after the descriptor): dropped plus the stripes, saturating.
func RingDropped(l MapLayout, data []byte) uint64 {
	if len(data) < 16 {
		return 0
	}
	return addStripes(binary.LittleEndian.Uint64(data[8:]), data, RingStripesOffset(l.MaxEntries))
}

// addStripes adds to n the MapNoRowStripes u64s of data from base, those
// data holds; saturating.
func addStripes(n uint64, data []byte, base uint64) uint64 {
	for i := uint64(0); i < MapNoRowStripes; i++ {
		off := base + i*MapNoRowStripe
		if off+8 > uint64(len(data)) {
			break
		}
		v := binary.LittleEndian.Uint64(data[off:])
		if n+v < n {
			return ^uint64(0)
		}
		n += v
	}
	return n
}

// PerThreadNoRow is the count of lookups past the rows in data, a
// per-thread map's data (after the descriptor) of layout l: the sum of its
// stripes, saturating.
func PerThreadNoRow(l MapLayout, data []byte) uint64 {
	return addStripes(0, data, uint64(l.NBuckets)*uint64(l.MaxEntries)*uint64(l.Stride))
}

func round8(n uint32) uint32 { return (n + 7) &^ 7 }

// MapLayout is the descriptor of one device map: what the translator
// emits at the head of __gpuext_map_<name> and what the host decodes.
type MapLayout struct {
	Type       MapType `json:"type"`
	KeySize    uint32  `json:"keySize"`
	ValueSize  uint32  `json:"valueSize"`
	MaxEntries uint32  `json:"maxEntries"`
	NBuckets   uint32  `json:"nbuckets"` // HASH buckets; PER_WARP slots; else MaxEntries
	Stride     uint32  `json:"stride"`   // bytes per entry/bucket/slot row
	DataSize   uint64  `json:"dataSize"` // bytes after the descriptor
}

// MaxMapData is the most device memory (bytes after the descriptor) one map
// may take.
const MaxMapData = 1 << 30

// Layout computes the device layout of a map (see gpuext_abi.h). Its sizes
// may come from a file a tenant wrote (devrt/probefiles/maps): each is bounded
// before it takes part in arithmetic, so nothing wraps and no loop runs long.
func Layout(t MapType, keySize, valueSize, maxEntries uint32) (MapLayout, error) {
	l := MapLayout{Type: t, KeySize: keySize, ValueSize: valueSize, MaxEntries: maxEntries}
	if t < MapArray || t > MapPerThread {
		return l, fmt.Errorf("map type %d is not a device map type", uint32(t))
	}
	if maxEntries == 0 {
		return l, fmt.Errorf("%s map: max_entries is 0", t)
	}
	// Every map of more entries, or with a larger key or value, needs more
	// than MaxMapData: refused here, before round8 or a product can wrap.
	if maxEntries > MaxMapData || keySize > MaxMapData || valueSize > MaxMapData {
		return l, fmt.Errorf("%s map: key size %d, value size %d, max_entries %d: more than 1 GiB of device memory", t, keySize, valueSize, maxEntries)
	}
	if t != MapRingbuf && valueSize == 0 {
		return l, fmt.Errorf("%s map: value size is 0", t) // the kernel refuses it too
	}
	switch t {
	case MapArray:
		if keySize != 4 {
			return l, fmt.Errorf("array map: key size %d, want 4", keySize)
		}
		l.NBuckets = maxEntries
		l.Stride = 8 + round8(valueSize)
		l.DataSize = uint64(l.Stride) * uint64(maxEntries)
	case MapHash:
		if keySize == 0 {
			return l, fmt.Errorf("hash map: key size is 0") // the kernel refuses it too
		}
		n := uint32(1)
		for n < 2*maxEntries { // 2*maxEntries <= 2^31: n stops at 2^31 at most
			n <<= 1
		}
		l.NBuckets = n
		l.Stride = 8 + round8(keySize) + round8(valueSize)
		// the buckets, then a u64 count of live entries (max_entries at most)
		l.DataSize = uint64(l.Stride)*uint64(n) + 8
	case MapPerWarp:
		if keySize != 4 {
			return l, fmt.Errorf("per-warp map: key size %d, want 4", keySize)
		}
		l.NBuckets = MapWarpSlots
		l.Stride = round8(valueSize)
		row := uint64(l.Stride) * uint64(maxEntries) // < 2^61: times MapWarpSlots could wrap
		if row > MaxMapData/MapWarpSlots {
			return l, fmt.Errorf("per-warp map needs %d bytes in each of %d warp slots, more than 1 GiB", row, MapWarpSlots)
		}
		l.DataSize = row * MapWarpSlots
	case MapRingbuf:
		l.NBuckets = maxEntries
		l.Stride = 1
		l.DataSize = RingStripesOffset(maxEntries) + MapStripesSize
	case MapPerThread:
		return l, fmt.Errorf("per-thread map: use PerThreadLayout (it has a row count)")
	default:
		return l, fmt.Errorf("map type %d is not a device map type", uint32(t))
	}
	if l.DataSize > MaxMapData {
		return l, fmt.Errorf("%s map needs %d bytes of device memory, more than 1 GiB", t, l.DataSize)
	}
	return l, nil
}

// KernelMapLayout is the device layout of a map as the ELF declares it
// (kernel or bpftime map type t, key and value sizes, max_entries,
// map_extra), with what DeviceMapOf says about it. A kernel ring buffer
// keeps its producer at most max_entries-1 bytes ahead of the consumer
// (records are multiples of 8), so it holds max_entries-8 bytes of
// records; the device log gets exactly that capacity, and a full ring
// refuses the same record in both.
func KernelMapLayout(t, keySize, valueSize, maxEntries uint32, extra uint64) (MapLayout, DeviceMap, error) {
	dm, err := DeviceMapOf(t, valueSize, maxEntries, extra)
	if err != nil {
		return MapLayout{}, dm, err
	}
	switch dm.Type {
	case MapPerThread:
		l, err := PerThreadLayout(keySize, valueSize, maxEntries, dm.Slots)
		return l, dm, err
	case MapRingbuf:
		max := dm.MaxEntries
		if !dm.PerLane && max > 8 {
			max = (max - 1) &^ 7
		}
		l, err := Layout(MapRingbuf, 0, 0, max)
		return l, dm, err
	}
	l, err := Layout(dm.Type, keySize, valueSize, dm.MaxEntries)
	return l, dm, err
}

// PerThreadLayout is the layout of a per-thread map of slots rows: row g
// (the launch's linear thread id) holds max_entries values of round8
// bytes; MapNoRowStripes u64s after the rows count lookups by threads past
// the last row.
func PerThreadLayout(keySize, valueSize, maxEntries, slots uint32) (MapLayout, error) {
	l := MapLayout{Type: MapPerThread, KeySize: keySize, ValueSize: valueSize, MaxEntries: maxEntries, NBuckets: slots}
	switch {
	case maxEntries == 0:
		return l, fmt.Errorf("per-thread map: max_entries is 0")
	case valueSize == 0:
		return l, fmt.Errorf("per-thread map: value size is 0")
	case keySize != 4:
		return l, fmt.Errorf("per-thread map: key size %d, want 4", keySize)
	case slots == 0 || slots > MapMaxThreadSlots:
		return l, fmt.Errorf("per-thread map: %d rows, want 1 to %d", slots, MapMaxThreadSlots)
	case maxEntries > MaxMapData || valueSize > MaxMapData:
		return l, fmt.Errorf("per-thread map: value size %d, max_entries %d: more than 1 GiB of device memory", valueSize, maxEntries)
	}
	l.Stride = round8(valueSize)
	row := uint64(l.Stride) * uint64(maxEntries)
	if row > MaxMapData/uint64(slots) {
		return l, fmt.Errorf("per-thread map needs %d bytes in each of %d rows, more than 1 GiB", row, slots)
	}
	l.DataSize = row*uint64(slots) + MapStripesSize
	if l.DataSize > MaxMapData {
		return l, fmt.Errorf("per-thread map needs %d bytes of device memory, more than 1 GiB", l.DataSize)
	}
	return l, nil
}

// MapInfo is one map of a probe module, as the manifest lists it.
type MapInfo struct {
	Name   string    `json:"name"`
	Symbol string    `json:"symbol"` // __gpuext_map_<name>: descriptor + data
	Layout MapLayout `json:"layout"`
}

// ProgInfo is one translated program.
type ProgInfo struct {
	Name     string `json:"name"`
	Attach   string `json:"attach"`   // kernel_entry | kernel_exit
	Function string `json:"function"` // __gpuext_prog_<name>
	Insns    int    `json:"insns"`
	// Kernel: the .entry the program runs in (bpftime's kprobe/KERNEL);
	// empty = every probed kernel.
	Kernel string `json:"kernel,omitempty"`
}

// ReadManifest reads a manifest.json.
func ReadManifest(path string) (*Manifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := &Manifest{}
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// Manifest describes a probe module (module.ptx) to the interposer and the CLI.
type Manifest struct {
	Version int `json:"version"` // ManifestVersion
	// Probe names (catalog entries) compiled into this module.
	Probes []string `json:"probes"`
	// MinPTX and MinTarget: what the fragment needs of the module it is
	// spliced into. The patcher raises a lower .version, never lowers one,
	// and leaves a module whose .target is below MinTarget unpatched.
	MinPTX    string `json:"minPtx"`    // e.g. "7.8"
	MinTarget int    `json:"minTarget"` // e.g. 70 for sm_70
	// Kernels: .entry names to probe; empty means every .entry.
	Kernels []string `json:"kernels,omitempty"`
	// LaunchTime: the interposer writes the host launch time for ctx.launch_ns.
	LaunchTime bool       `json:"launchTime,omitempty"`
	Maps       []MapInfo  `json:"maps"`
	Programs   []ProgInfo `json:"programs"`
	// HostWrites: map elements the interposer writes (a probe's hostWrites).
	HostWrites []HostWrite `json:"hostWrites,omitempty"`
}

// HostWrite is one u64 element of a map of the module that the interposer
// writes, not a program: Offset is the value's byte offset in Symbol
// (descriptor + data), Value what is written (HostLaunchTime, HostClockOffset).
type HostWrite struct {
	Map    string `json:"map"`
	Key    uint32 `json:"key"`
	Symbol string `json:"symbol"`
	Offset uint64 `json:"offset"`
	Value  string `json:"value"`
}

// What the interposer writes into a map element (module.conf host_write).
const (
	// HostLaunchTime: before each launch of a probed kernel, on the
	// launch's stream: the launch's host time in the device's %globaltimer
	// clock, ns (what ctx.launch_ns holds). bpftime's launchlate has a host
	// uprobe on cudaLaunchKernel store it in an array its device program reads.
	HostLaunchTime = hostLaunchTime
	// HostClockOffset: at bind, an s64: %globaltimer minus the host's
	// CLOCK_MONOTONIC, ns (a host bpf_ktime_get_ns() plus it is the same
	// instant on the device's clock). bpftime's loader writes
	// CLOCK_REALTIME - CLOCK_MONOTONIC for this use, taking %globaltimer
	// for CLOCK_REALTIME; here the measured device offset is added.
	HostClockOffset = hostClockOffset
)

// HostValues are the values a HostWrite may name.
var HostValues = []string{HostLaunchTime, HostClockOffset}

// ManifestVersion is the current manifest format.
const ManifestVersion = 1

// PTX-level contract between the translator, the helper library and the
// patcher (docs/device-probes.md).
const (
	// Dispatch functions the patcher calls: .func NAME (.param .b64 kernel_id)
	FuncEntry = funcEntry
	FuncExit  = funcExit
	// .visible .global .u32 the interposer sets after load.
	SymTenantID = symTenantID
	// .visible .global .u64 the interposer sets before each launch (LaunchTime).
	SymLaunchNs = symLaunchNs
	// Helper library functions: .func (.param .b64 r) NAME (.param .b64 a, ...)
	FuncMapLookup   = "__gpuext_h_map_lookup_elem" // (map, key) -> value ptr or 0
	FuncMapUpdate   = "__gpuext_h_map_update_elem" // (map, key, value, flags) -> 0 / -errno
	FuncMapDelete   = "__gpuext_h_map_delete_elem" // (map, key) -> 0 / -errno
	FuncRingbufOut  = "__gpuext_h_ringbuf_output"  // (map, data, size, flags) -> 0 / -errno
	MapSymbolPrefix = symMapPrefix
	// The inline form's placeholders and guard comment (ptx.InlineSite,
	// ptx.InlineKernelID, ptx.GuardMark).
	InlineSite      = inlineSite
	InlineKernelID  = inlineKernelID
	InlineGuardMark = inlineGuardMark
	ProgFuncPrefix  = "__gpuext_prog_"
)

// The bundle contract with the interposer, from
// devrt/include/gpuext_devrt_probes.h (abi_gen.go): the files of a tenant's
// bundle ($GPUEXT_TENANT_DIR/probes/) and reports ($GPUEXT_TENANT_ACCT/probes/),
// the module.conf format and the <key>.status lines.
const (
	// BundleDir is the subdirectory of the tenant dir (the bundle) and of
	// the acct dir (what the interposer reports).
	BundleDir    = probesDir
	ModuleFile   = moduleFile
	ManifestFile = manifestFile
	// ConfFile is the module description the interposer reads.
	ConfFile = confFile
	// InlineEntryFile and InlineExitFile: the inline form of each attach
	// point (module.conf "inline 1").
	InlineEntryFile = inlineEntryFile
	InlineExitFile  = inlineExitFile
	// A process's report files: <key>.status, <key>-<image>[-<ctx>].maps, <key>.launches.
	StatusSuffix   = statusSuffix
	MapsSuffix     = mapsSuffix
	LaunchesSuffix = launchesSuffix
)

// module.conf: its version line and directives (gpuext_devrt_probes.h).
const (
	ConfVersion = confVersionNumber

	ConfDirectiveVersion    = confVersion
	ConfDirectiveMinPTX     = confMinPTX
	ConfDirectiveMinTarget  = confMinTarget
	ConfDirectiveLaunchTime = confLaunchTime
	ConfDirectiveKernel     = confKernel
	ConfDirectiveMap        = confMap
	ConfDirectiveHostWrite  = confHostWrite
	ConfDirectiveGuardEntry = confGuardEntry
	ConfDirectiveGuardExit  = confGuardExit
	ConfDirectiveInline     = confInline
	ConfDirectiveEntryLate  = confEntryLate

	// The values of guard_entry and guard_exit.
	ConfGuardNone    = guardNone
	ConfGuardThread0 = guardThread0

	// MaxHostWrites is the most host_write lines the interposer takes.
	MaxHostWrites = confMaxHostWrites
	// MaxKernelNameBytes is the longest name a kernel line may hold.
	MaxKernelNameBytes = confMaxKernelName
)

// The <key>.status lines: the keys and values a reader acts on.
const (
	StatusKeyImage      = statusKeyImage
	StatusKeyState      = statusKeyState
	StatusKeyReason     = statusKeyReason
	StatusKeyLaunchTime = statusKeyLaunchTime
	StatusKeyFinal      = statusKeyFinal
	StatusImageNone     = statusImageNone // a process-wide line
	StatusPatched       = statusPatched
	StatusUnpatched     = statusUnpatched
	StatusBound         = statusBound
	StatusUnbound       = statusUnbound
	StatusOff           = statusOff
	StatusMissed        = statusMissed
)
