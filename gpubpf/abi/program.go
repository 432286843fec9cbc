package abi

import (
	"fmt"
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
