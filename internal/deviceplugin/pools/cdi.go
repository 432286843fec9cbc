package pools

import (
	"fmt"
	"strconv"
	"strings"

	"tags.cncf.io/container-device-interface/pkg/parser"
)

// CDI defaults: the names of the spec NVIDIA's toolkit generates on a node
// (`nvidia-ctk cdi generate`): one device per GPU, named by its index
// ("nvidia.com/gpu=1"), by its UUID ("nvidia.com/gpu=GPU-...") and
// "nvidia.com/gpu=all".
const (
	DefaultCDIKind = "nvidia.com/gpu"
	// CDINameByIndex names a GPU by its NVML index, as nvidia-ctk's
	// --device-name-strategy=index does.
	CDINameByIndex = "index"
	// CDINameByUUID names a GPU by its UUID (--device-name-strategy=uuid).
	CDINameByUUID = "uuid"
)

// NVIDIAVisibleDevicesVoid is NVIDIA_VISIBLE_DEVICES when the GPUs come
// through CDI: the NVIDIA container toolkit, where it is the runtime, adds
// no GPU of its own (the image's NVIDIA_VISIBLE_DEVICES=all, which the CUDA
// base images set, would otherwise hand the container every GPU of the node).
const NVIDIAVisibleDevicesVoid = "void"

// CDIConfig is the "cdi" section of Config: how Allocate names the GPUs it
// gives a container, as Container Device Interface devices that the
// runtime (containerd 2.x, CRI-O) resolves in the node's CDI specs.
type CDIConfig struct {
	// Enabled: Allocate returns CDI device names (default true). false: the
	// env only (CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES), for nodes
	// whose NVIDIA container toolkit gives the GPUs in legacy mode.
	Enabled *bool `json:"enabled,omitempty"`
	// Kind is the CDI kind, vendor/class, of the node's GPU spec (default
	// nvidia.com/gpu, what nvidia-ctk generates).
	Kind string `json:"kind,omitempty"`
	// DeviceNameStrategy is how the spec names a GPU: "index" (default) or
	// "uuid", as nvidia-ctk cdi generate --device-name-strategy. "uuid"
	// needs every GPU's UUID (devicePlugin.gpus[].uuid, or NVML).
	DeviceNameStrategy string `json:"deviceNameStrategy,omitempty"`
}

// CDISpec is a validated CDIConfig.
type CDISpec struct {
	Enabled            bool
	Kind               string // vendor/class
	DeviceNameStrategy string // CDINameByIndex or CDINameByUUID
}

// validate fills the defaults of c and checks them; the kind with the CDI
// library's own parser, the one containerd resolves names with.
func (c *CDIConfig) validate() (CDISpec, error) {
	s := CDISpec{Enabled: true, Kind: DefaultCDIKind, DeviceNameStrategy: CDINameByIndex}
	if c == nil {
		return s, nil
	}
	if c.Enabled != nil {
		s.Enabled = *c.Enabled
	}
	if c.Kind != "" {
		s.Kind = c.Kind
	}
	vendor, class := parser.ParseQualifier(s.Kind)
	if vendor == "" {
		return CDISpec{}, configErr("cdi.kind", s.Kind, "want VENDOR/CLASS, e.g. "+DefaultCDIKind)
	}
	if err := parser.ValidateVendorName(vendor); err != nil {
		return CDISpec{}, configErr("cdi.kind", s.Kind, err.Error())
	}
	if err := parser.ValidateClassName(class); err != nil {
		return CDISpec{}, configErr("cdi.kind", s.Kind, err.Error())
	}
	switch c.DeviceNameStrategy {
	case "":
	case CDINameByIndex, CDINameByUUID:
		s.DeviceNameStrategy = c.DeviceNameStrategy
	default:
		return CDISpec{}, configErr("cdi.deviceNameStrategy", c.DeviceNameStrategy,
			fmt.Sprintf("want %q or %q", CDINameByIndex, CDINameByUUID))
	}
	return s, nil
}

// CheckCDI says whether Allocate can name every GPU of s as a CDI device:
// naming by UUID needs each GPU's UUID, from the config or from NVML.
// Validate checks the GPUs a config lists, Discover those NVML reports.
func (s Spec) CheckCDI() error {
	if !s.CDI.Enabled || s.CDI.DeviceNameStrategy != CDINameByUUID {
		return nil
	}
	for _, g := range s.GPUs {
		if g.UUID == "" {
			return configErr("cdi.deviceNameStrategy", s.CDI.DeviceNameStrategy,
				fmt.Sprintf("GPU %d has no UUID (set devicePlugin.gpus[%d].uuid, or name GPUs by %q)", g.Index, g.Index, CDINameByIndex))
		}
	}
	return nil
}

// CDIDevices are the fully qualified CDI names of the GPUs of shares, in
// GPU index order ("nvidia.com/gpu=1"); none when CDI is off.
func (s Spec) CDIDevices(shares []Share) ([]string, error) {
	if !s.CDI.Enabled {
		return nil, nil
	}
	vendor, class := parser.ParseQualifier(s.CDI.Kind)
	out := make([]string, 0, len(shares))
	for _, sh := range shares {
		name := strconv.Itoa(sh.GPU)
		if s.CDI.DeviceNameStrategy == CDINameByUUID {
			g, ok := s.GPU(sh.GPU)
			if !ok || g.UUID == "" {
				return nil, fmt.Errorf("%w: GPU %d has no UUID to name it by", ErrConfig, sh.GPU)
			}
			name = g.UUID
		}
		q := parser.QualifiedName(vendor, class, name)
		if _, _, _, err := parser.ParseQualifiedName(q); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		out = append(out, q)
	}
	return out, nil
}

// AllocateEnv is the env Allocate sets in a container given shares.
//
// CDI off: VisibleEnv, the toolkit's legacy contract.
//
// CDI on, the container has the device nodes of its own GPUs only, so CUDA
// numbers them from 0: a host index in CUDA_VISIBLE_DEVICES would name the
// wrong GPU, or none. So CUDA_VISIBLE_DEVICES is the GPUs' UUIDs (which
// hold whatever the numbering) when every one is known, and unset
// otherwise; CUDA_DEVICE_ORDER=PCI_BUS_ID keeps CUDA's ordinals in the
// GPUs' index order, the order of the quotas admission writes per device
// ordinal; NVIDIA_VISIBLE_DEVICES is void (NVIDIAVisibleDevicesVoid).
func (s Spec) AllocateEnv(shares []Share) map[string]string {
	if !s.CDI.Enabled {
		return s.VisibleEnv(shares)
	}
	env := map[string]string{EnvCUDADeviceOrder: "PCI_BUS_ID", EnvNVIDIAVisibleDevices: NVIDIAVisibleDevicesVoid}
	if uuids, ok := s.uuids(shares); ok {
		env[EnvCUDAVisibleDevices] = strings.Join(uuids, ",")
	}
	return env
}

// uuids are the UUIDs of the GPUs of shares, in order; ok only when every
// one has a UUID.
func (s Spec) uuids(shares []Share) ([]string, bool) {
	out := make([]string, 0, len(shares))
	for _, sh := range shares {
		g, ok := s.GPU(sh.GPU)
		if !ok || g.UUID == "" {
			return nil, false
		}
		out = append(out, g.UUID)
	}
	return out, len(out) > 0
}
