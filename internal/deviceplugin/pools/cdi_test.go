package pools

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestValidateCDI(t *testing.T) {
	off := false
	two := []GPUConfig{{Memory: "8GiB", UUID: "GPU-aa"}, {Memory: "8GiB"}}
	for _, tc := range []struct {
		name string
		cfg  Config
		want CDISpec // when err is ""
		err  string
	}{
		{"absent: on, NVIDIA's names by index", Config{}, CDISpec{true, "nvidia.com/gpu", "index"}, ""},
		{"empty section: the same", Config{CDI: &CDIConfig{}}, CDISpec{true, "nvidia.com/gpu", "index"}, ""},
		{"off", Config{CDI: &CDIConfig{Enabled: &off}}, CDISpec{false, "nvidia.com/gpu", "index"}, ""},
		{"another kind, by uuid", Config{CDI: &CDIConfig{Kind: "example.com/gpu-mem", DeviceNameStrategy: "uuid"}},
			CDISpec{true, "example.com/gpu-mem", "uuid"}, ""},
		{"uuid with discovery: checked once NVML answered", Config{CDI: &CDIConfig{DeviceNameStrategy: "uuid"}},
			CDISpec{true, "nvidia.com/gpu", "uuid"}, ""},
		{"off: a GPU without UUID is fine by uuid", Config{GPUs: two, CDI: &CDIConfig{Enabled: &off, DeviceNameStrategy: "uuid"}},
			CDISpec{false, "nvidia.com/gpu", "uuid"}, ""},
		{"kind without class", Config{CDI: &CDIConfig{Kind: "nvidia.com"}}, CDISpec{},
			`devicePlugin.cdi.kind "nvidia.com": want VENDOR/CLASS, e.g. nvidia.com/gpu`},
		{"kind with a name", Config{CDI: &CDIConfig{Kind: "nvidia.com/gpu=0"}}, CDISpec{},
			`devicePlugin.cdi.kind "nvidia.com/gpu=0": invalid class. invalid character '=' in name "gpu=0"`},
		{"vendor starts with a digit", Config{CDI: &CDIConfig{Kind: "3dfx.com/gpu"}}, CDISpec{},
			`devicePlugin.cdi.kind "3dfx.com/gpu": invalid vendor. "3dfx.com", should start with letter`},
		{"class ends with a dash", Config{CDI: &CDIConfig{Kind: "nvidia.com/gpu-"}}, CDISpec{},
			`devicePlugin.cdi.kind "nvidia.com/gpu-": invalid class. "gpu-", should end with a letter or digit`},
		{"two slashes", Config{CDI: &CDIConfig{Kind: "nvidia.com/gpu/x"}}, CDISpec{},
			`devicePlugin.cdi.kind "nvidia.com/gpu/x": invalid class.`},
		{"unknown strategy", Config{CDI: &CDIConfig{DeviceNameStrategy: "type-index"}}, CDISpec{},
			`devicePlugin.cdi.deviceNameStrategy "type-index": want "index" or "uuid"`},
		{"uuid, a listed GPU without one", Config{GPUs: two, CDI: &CDIConfig{DeviceNameStrategy: "uuid"}}, CDISpec{},
			`devicePlugin.cdi.deviceNameStrategy "uuid": GPU 1 has no UUID (set devicePlugin.gpus[1].uuid, or name GPUs by "index")`},
	} {
		s, err := tc.cfg.Validate()
		if tc.err != "" {
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || s.CDI != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, s.CDI, err, tc.want)
		}
	}
}

// What Allocate puts in a container: the CDI names of its GPUs and an env
// whose GPU names still hold once the container's GPUs are numbered from 0.
func TestAllocateNamesAndEnv(t *testing.T) {
	off := false
	gpus := []GPUConfig{{Memory: "8GiB", UUID: "GPU-aa"}, {Memory: "8GiB", UUID: "GPU-bb"}, {Memory: "8GiB", UUID: "GPU-cc"}}
	noUUIDs := []GPUConfig{{Memory: "8GiB"}, {Memory: "8GiB"}, {Memory: "8GiB"}}
	for _, tc := range []struct {
		name   string
		cfg    Config
		shares []int // GPU indices
		cdi    []string
		env    map[string]string
	}{
		{"default, host GPU 1 alone: its index names it in the spec, its UUID in CUDA",
			Config{GPUs: gpus}, []int{1}, []string{"nvidia.com/gpu=1"},
			map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-bb", "NVIDIA_VISIBLE_DEVICES": "void", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}},
		{"default, two GPUs in index order",
			Config{GPUs: gpus}, []int{0, 2}, []string{"nvidia.com/gpu=0", "nvidia.com/gpu=2"},
			map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-aa,GPU-cc", "NVIDIA_VISIBLE_DEVICES": "void", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}},
		{"no UUIDs: no CUDA_VISIBLE_DEVICES at all (a host index would be wrong in the container)",
			Config{GPUs: noUUIDs}, []int{2}, []string{"nvidia.com/gpu=2"},
			map[string]string{"NVIDIA_VISIBLE_DEVICES": "void", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}},
		{"by uuid",
			Config{GPUs: gpus, CDI: &CDIConfig{DeviceNameStrategy: "uuid"}}, []int{1, 2}, []string{"nvidia.com/gpu=GPU-bb", "nvidia.com/gpu=GPU-cc"},
			map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-bb,GPU-cc", "NVIDIA_VISIBLE_DEVICES": "void", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}},
		{"another kind",
			Config{GPUs: noUUIDs, CDI: &CDIConfig{Kind: "example.com/accel"}}, []int{0}, []string{"example.com/accel=0"},
			map[string]string{"NVIDIA_VISIBLE_DEVICES": "void", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}},
		{"off, UUIDs: the legacy env by UUID",
			Config{GPUs: gpus, CDI: &CDIConfig{Enabled: &off}}, []int{1}, nil,
			map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-bb", "NVIDIA_VISIBLE_DEVICES": "GPU-bb"}},
		{"off, no UUIDs: the legacy env by host index (the toolkit gives the container every GPU it names)",
			Config{GPUs: noUUIDs, CDI: &CDIConfig{Enabled: &off}}, []int{0, 2}, nil,
			map[string]string{"CUDA_VISIBLE_DEVICES": "0,2", "NVIDIA_VISIBLE_DEVICES": "0,2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}},
	} {
		s := spec(t, tc.cfg)
		var shares []Share
		for _, g := range tc.shares {
			shares = append(shares, Share{GPU: g, Units: 1, Bytes: s.Unit})
		}
		cdi, err := s.CDIDevices(shares)
		if err != nil || !slices.Equal(cdi, tc.cdi) {
			t.Errorf("%s: CDI devices %q, %v; want %q", tc.name, cdi, err, tc.cdi)
		}
		if env := s.AllocateEnv(shares); !maps.Equal(env, tc.env) {
			t.Errorf("%s: env %v, want %v", tc.name, env, tc.env)
		}
	}
}
