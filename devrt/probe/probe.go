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
package probe

import (
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

// AttachOfSection maps an ELF section name to its attach point.
func AttachOfSection(sec string) (Attach, bool) {
	switch strings.TrimSuffix(sec, "/") {
	case SecKernelEntry:
		return KernelEntry, true
	case SecKernelExit:
		return KernelExit, true
	}
	return 0, false
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
)

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
	h := uint64(14695981039346656037)
	for i := 0; i < len(entry); i++ {
		h ^= uint64(entry[i])
		h *= 1099511628211
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
)

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
	}
	return fmt.Sprintf("maptype(%d)", uint32(t))
}

// Device map layout constants (struct gpuext_dmap).
const (
	MapHdrSize   = dmapHdrSize
	MapWarpSlots = dmapWarpSlots
)

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
// may come from a file a tenant wrote (devrt/probe/maps): each is bounded
// before it takes part in arithmetic, so nothing wraps and no loop runs long.
func Layout(t MapType, keySize, valueSize, maxEntries uint32) (MapLayout, error) {
	l := MapLayout{Type: t, KeySize: keySize, ValueSize: valueSize, MaxEntries: maxEntries}
	if t < MapArray || t > MapRingbuf {
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
		l.DataSize = 16 + uint64(maxEntries)
	default:
		return l, fmt.Errorf("map type %d is not a device map type", uint32(t))
	}
	if l.DataSize > MaxMapData {
		return l, fmt.Errorf("%s map needs %d bytes of device memory, more than 1 GiB", t, l.DataSize)
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
}

// ManifestVersion is the current manifest format.
const ManifestVersion = 1

// PTX-level contract between the translator, the helper library and the
// patcher (docs/device-probes.md).
const (
	// Dispatch functions the patcher calls: .func NAME (.param .b64 kernel_id)
	FuncEntry = funcEntry
	FuncExit  = funcExit
	// .visible .global .u32 the interposer sets after load.
	SymTenantID = "__gpuext_tenant_id"
	// .visible .global .u64 the interposer sets before each launch (LaunchTime).
	SymLaunchNs = "__gpuext_launch_ns"
	// Helper library functions: .func (.param .b64 r) NAME (.param .b64 a, ...)
	FuncMapLookup   = "__gpuext_h_map_lookup_elem" // (map, key) -> value ptr or 0
	FuncMapUpdate   = "__gpuext_h_map_update_elem" // (map, key, value, flags) -> 0 / -errno
	FuncMapDelete   = "__gpuext_h_map_delete_elem" // (map, key) -> 0 / -errno
	FuncRingbufOut  = "__gpuext_h_ringbuf_output"  // (map, data, size, flags) -> 0 / -errno
	MapSymbolPrefix = "__gpuext_map_"
	ProgFuncPrefix  = "__gpuext_prog_"
)

// Files in the tenant directory ($GPUEXT_TENANT_DIR/probes/).
const (
	ModuleFile   = "module.ptx"
	ManifestFile = "manifest.json"
)
