package abi

import (
	"encoding/json"
	"fmt"
	"os"
)

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
