package ids

import "strconv"

// TenantID is a small integer the registry allocates; never 0.
type TenantID uint32

// DefaultPinDir is where the registry pins its maps.
const DefaultPinDir = "/sys/fs/bpf/gpuext"

// Runtime says which admission path registered a cgroup.
type Runtime uint32

const (
	RuntimeNRI         Runtime = 1
	RuntimeOCIHook     Runtime = 2
	RuntimeRuncWrapper Runtime = 3
)

// String is the runtime's name in gpuextctl's tables and the metrics'
// runtime label: containerd, oci-hook, runc-wrapper, or unknown(N).
func (r Runtime) String() string {
	switch r {
	case RuntimeNRI:
		return "containerd"
	case RuntimeOCIHook:
		return "oci-hook"
	case RuntimeRuncWrapper:
		return "runc-wrapper"
	}
	return "unknown(" + strconv.FormatUint(uint64(r), 10) + ")"
}
