package pools

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/gpuext/gpuext/cgroup/pcibus"
	"github.com/gpuext/gpuext/policies/grammar"
)

// Defaults of Config.
const (
	DefaultResource   = "gpuext.io/gpu-memory"
	DefaultUnit       = "1GiB"
	DefaultKubeletDir = "/var/lib/kubelet"
	// SocketName is the plugin's socket in <kubeletDir>/device-plugins.
	SocketName = "gpuext-gpu-memory.sock"
	// MinUnit is the smallest unit: a 141 GiB GPU is then 564 devices.
	MinUnit = 256 << 20
	// MaxDevices bounds the devices of a node (what ListAndWatch sends and
	// the kubelet keeps per device): 8 GPUs of 141 GiB in 256 MiB units are 4,512.
	MaxDevices = 16384
	// MaxGPUs is the most GPUs a node may list (the device runtime keeps a
	// quota for at most this many device ordinals, GPUEXT_DEVRT_MAX_DEVICES).
	MaxGPUs = 16
)

// Config is the "devicePlugin" section of the agent's config file. Present,
// the agent serves the device plugin and admission takes each Kubernetes
// container's GPU memory from the kubelet (docs/device-plugin.md).
type Config struct {
	// Resource is the extended resource name (default gpuext.io/gpu-memory).
	Resource string `json:"resource,omitempty"`
	// Unit is the memory of one device ("1GiB", "512MiB"; at least 256MiB,
	// a multiple of 1MiB). A request of N is N units.
	Unit string `json:"unit,omitempty"`
	// KubeletDir is the kubelet's root directory as the agent sees it: the
	// kubelet's registration socket is <kubeletDir>/device-plugins/kubelet.sock,
	// the plugin's own socket goes beside it, and the pod-resources socket
	// is <kubeletDir>/pod-resources/kubelet.sock.
	KubeletDir string `json:"kubeletDir,omitempty"`
	// GPUs lists the node's GPUs in NVML index order, each with its memory.
	// Empty: the agent asks NVML through Gpuview. On a node without a GPU
	// (CI) this is what the node advertises.
	GPUs []GPUConfig `json:"gpus,omitempty"`
	// Gpuview is the gpuext-gpuview binary that reports the GPUs from NVML
	// when GPUs is empty (default: gpuext-gpuview beside the agent, else on PATH).
	Gpuview string `json:"gpuview,omitempty"`
	// CDI is how Allocate names the GPUs as CDI devices (CDIConfig); absent:
	// on, with the names of NVIDIA's generated spec.
	CDI *CDIConfig `json:"cdi,omitempty"`
}

// GPUConfig is one GPU of Config.GPUs.
type GPUConfig struct {
	// Memory is the GPU's memory to share out ("141GiB").
	Memory string `json:"memory"`
	// UUID is the GPU's UUID ("GPU-..."), optional: with it, Allocate names
	// the GPU by UUID in CUDA_VISIBLE_DEVICES (and, CDI off, in
	// NVIDIA_VISIBLE_DEVICES), which holds where the container's GPUs are
	// renumbered from 0; cdi.deviceNameStrategy "uuid" needs it.
	UUID string `json:"uuid,omitempty"`
	// PCIBusID is the GPU's PCI bus id ("0000:17:00.0"; NVML's
	// "00000000:17:00.0" too), optional: with it, the kernel's cgroup dmem
	// controller can hold the GPU's quotas (its region is named by it).
	// NVML discovery reports it; set it here when the config lists the GPUs.
	PCIBusID string `json:"pciBusId,omitempty"`
}

// GPU is one GPU of a node: a pool of Units devices.
type GPU struct {
	Index  int    // NVML index (PCI bus order)
	UUID   string // empty when not known
	Memory uint64 // bytes
	// PCIBusID as NVML reports it (discovery); empty when not known. The
	// agent finds the GPU's cgroup dmem region by it.
	PCIBusID string
}

// Spec is a validated Config: what the plugin serves.
type Spec struct {
	Resource   string
	Unit       uint64
	KubeletDir string
	GPUs       []GPU // empty until discovered (Config.GPUs empty)
	Gpuview    string
	CDI        CDISpec
}

// ErrConfig is wrapped by every error of Validate.
var ErrConfig = errors.New("bad devicePlugin config")

func configErr(key, value, why string) error {
	return fmt.Errorf("%w: devicePlugin.%s %q: %s", ErrConfig, key, value, why)
}

// Validate checks c and fills its defaults. Errors name the key
// (devicePlugin.unit, devicePlugin.gpus[1].memory, ...).
func (c Config) Validate() (Spec, error) {
	s := Spec{Resource: c.Resource, KubeletDir: c.KubeletDir, Gpuview: c.Gpuview}
	if s.Resource == "" {
		s.Resource = DefaultResource
	}
	if err := validResourceName(s.Resource); err != nil {
		return Spec{}, configErr("resource", s.Resource, err.Error())
	}
	unit := c.Unit
	if unit == "" {
		unit = DefaultUnit
	}
	n, err := grammar.ParseSize(unit)
	if err != nil {
		return Spec{}, configErr("unit", unit, err.Error())
	}
	if n < MinUnit || n%(1<<20) != 0 {
		return Spec{}, configErr("unit", unit, fmt.Sprintf("want a multiple of 1MiB of at least %s", grammar.FormatSize(MinUnit)))
	}
	s.Unit = n
	if s.CDI, err = c.CDI.validate(); err != nil {
		return Spec{}, err
	}
	if s.KubeletDir == "" {
		s.KubeletDir = DefaultKubeletDir
	}
	if !filepath.IsAbs(s.KubeletDir) {
		return Spec{}, configErr("kubeletDir", s.KubeletDir, "must be an absolute path")
	}
	if len(c.GPUs) > MaxGPUs {
		return Spec{}, configErr("gpus", fmt.Sprint(len(c.GPUs)), fmt.Sprintf("%d GPUs, at most %d", len(c.GPUs), MaxGPUs))
	}
	for i, g := range c.GPUs {
		key := fmt.Sprintf("gpus[%d].memory", i)
		m, err := grammar.ParseSize(g.Memory)
		if err != nil {
			return Spec{}, configErr(key, g.Memory, err.Error())
		}
		if m < s.Unit {
			return Spec{}, configErr(key, g.Memory, fmt.Sprintf("less than one unit (%s)", grammar.FormatSize(s.Unit)))
		}
		if g.UUID != "" && !ValidUUID(g.UUID) {
			return Spec{}, configErr(fmt.Sprintf("gpus[%d].uuid", i), g.UUID, `want "GPU-" or "MIG-" and hex digits and dashes`)
		}
		if g.PCIBusID != "" {
			if _, err := pcibus.Normalize(g.PCIBusID); err != nil {
				return Spec{}, configErr(fmt.Sprintf("gpus[%d].pciBusId", i), g.PCIBusID, "want DOMAIN:BUS:DEVICE.FUNCTION in hex, e.g. 0000:17:00.0")
			}
		}
		s.GPUs = append(s.GPUs, GPU{Index: i, UUID: g.UUID, Memory: m, PCIBusID: g.PCIBusID})
	}
	if err := s.CheckDevices(); err != nil {
		return Spec{}, err
	}
	if err := s.CheckCDI(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// CheckDevices bounds the node's device count.
func (s Spec) CheckDevices() error {
	total := 0
	for _, g := range s.GPUs {
		total += s.Units(g)
	}
	if total > MaxDevices {
		return configErr("unit", grammar.FormatSize(s.Unit), fmt.Sprintf("the GPUs make %d devices, at most %d: use a larger unit", total, MaxDevices))
	}
	return nil
}

// Units is how many devices GPU g is: its memory in whole units.
func (s Spec) Units(g GPU) int { return int(g.Memory / s.Unit) }

// RegistrationSocket is the kubelet's registration socket.
func (s Spec) RegistrationSocket() string {
	return filepath.Join(s.KubeletDir, "device-plugins", "kubelet.sock")
}

// PluginSocket is the plugin's own socket, in the kubelet's device-plugins directory.
func (s Spec) PluginSocket() string { return filepath.Join(s.KubeletDir, "device-plugins", SocketName) }

// PodResourcesSocket is the kubelet's pod-resources API socket.
func (s Spec) PodResourcesSocket() string {
	return filepath.Join(s.KubeletDir, "pod-resources", "kubelet.sock")
}

// validResourceName: an extended resource outside kubernetes.io, DOMAIN/NAME.
func validResourceName(r string) error {
	domain, name, ok := strings.Cut(r, "/")
	switch {
	case !ok || domain == "" || name == "":
		return errors.New("want DOMAIN/NAME, e.g. " + DefaultResource)
	case domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io"):
		return errors.New("the kubernetes.io domain is not for extended resources")
	case len(r) > 253:
		return fmt.Errorf("%d bytes, at most 253", len(r))
	}
	for _, part := range []string{domain, name} {
		for _, ch := range part {
			if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '.' || ch == '_' ||
				(part == name && ch >= 'A' && ch <= 'Z')) {
				return fmt.Errorf("character %q is not allowed", ch)
			}
		}
	}
	return nil
}

func ValidUUID(u string) bool {
	rest, ok := strings.CutPrefix(u, "GPU-")
	if !ok {
		rest, ok = strings.CutPrefix(u, "MIG-")
	}
	if !ok || rest == "" || len(u) > 96 {
		return false
	}
	for _, ch := range rest {
		if !(ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'f' || ch >= 'A' && ch <= 'F' || ch == '-') {
			return false
		}
	}
	return true
}
