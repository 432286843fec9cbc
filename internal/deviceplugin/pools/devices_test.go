package pools

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func spec(t *testing.T, c Config) Spec {
	t.Helper()
	s, err := c.Validate()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestValidateNamesTheKey(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Unit: "100MiB"}, `devicePlugin.unit "100MiB": want a multiple of 1MiB of at least 256MiB`},
		{Config{Unit: "1.5GiB"}, `devicePlugin.unit "1.5GiB"`},
		{Config{Unit: "1000000000B"}, `devicePlugin.unit "1000000000B": want a multiple of 1MiB`},
		{Config{Resource: "gpu-memory"}, `devicePlugin.resource "gpu-memory": want DOMAIN/NAME`},
		{Config{Resource: "kubernetes.io/gpu"}, `devicePlugin.resource "kubernetes.io/gpu"`},
		{Config{KubeletDir: "var/lib/kubelet"}, `devicePlugin.kubeletDir "var/lib/kubelet": must be an absolute path`},
		{Config{GPUs: []GPUConfig{{Memory: "48GiB"}, {Memory: "48G"}}}, `devicePlugin.gpus[1].memory "48G"`},
		{Config{GPUs: []GPUConfig{{Memory: "512MiB"}}}, `devicePlugin.gpus[0].memory "512MiB": less than one unit (1GiB)`},
		{Config{GPUs: []GPUConfig{{Memory: "8GiB", UUID: "GPU-x"}}}, `devicePlugin.gpus[0].uuid "GPU-x"`},
		{Config{GPUs: []GPUConfig{{Memory: "8GiB"}, {Memory: "8GiB", PCIBusID: "17:00"}}}, `devicePlugin.gpus[1].pciBusId "17:00": want DOMAIN:BUS:DEVICE.FUNCTION`},
		{Config{Unit: "256MiB", GPUs: slices.Repeat([]GPUConfig{{Memory: "1TiB"}}, 2)}, `the GPUs make 8192 devices, at most 16384`},
		{Config{Unit: "256MiB", GPUs: slices.Repeat([]GPUConfig{{Memory: "1TiB"}}, 5)}, `the GPUs make 20480 devices, at most 16384: use a larger unit`},
		{Config{GPUs: slices.Repeat([]GPUConfig{{Memory: "8GiB"}}, 17)}, `devicePlugin.gpus "17": 17 GPUs, at most 16`},
	} {
		_, err := tc.cfg.Validate()
		if strings.HasPrefix(tc.want, "the GPUs make 8192") {
			if err != nil {
				t.Errorf("%+v: %v", tc.cfg, err)
			}
			continue
		}
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if s := spec(t, Config{GPUs: []GPUConfig{{Memory: "8GiB", PCIBusID: "0000:17:00.0"}}}); s.GPUs[0].PCIBusID != "0000:17:00.0" {
		t.Fatalf("gpus[0].pciBusId not kept: %+v", s.GPUs[0])
	}
	s := spec(t, Config{})
	if s.Resource != "gpuext.io/gpu-memory" || s.Unit != 1<<30 || s.RegistrationSocket() != "/var/lib/kubelet/device-plugins/kubelet.sock" ||
		s.PodResourcesSocket() != "/var/lib/kubelet/pod-resources/kubelet.sock" || s.PluginSocket() != "/var/lib/kubelet/device-plugins/gpuext-gpu-memory.sock" {
		t.Fatalf("defaults: %+v", s)
	}
}

func TestDeviceIDs(t *testing.T) {
	s := spec(t, Config{Unit: "512MiB", GPUs: []GPUConfig{{Memory: "2GiB"}, {Memory: "1600MiB"}}}) // 4 + 3 units
	var got []string
	for _, d := range s.DeviceIDs() {
		got = append(got, d.String())
	}
	want := []string{"gpu0-m000", "gpu0-m001", "gpu0-m002", "gpu0-m003", "gpu1-m000", "gpu1-m001", "gpu1-m002"}
	if !slices.Equal(got, want) {
		t.Fatalf("ids = %v, want %v", got, want)
	}
	for _, id := range want {
		if d, err := ParseDeviceID(id); err != nil || d.String() != id {
			t.Errorf("ParseDeviceID(%q) = %v, %v", id, d, err)
		}
	}
	if d, err := ParseDeviceID("gpu12-m1234"); err != nil || d != (DeviceID{12, 1234}) {
		t.Errorf("gpu12-m1234: %v %v", d, err)
	}
	for _, bad := range []string{"", "gpu0", "gpu0-m17", "gpu00-m017", "gpu-1-m001", "gpu0-m0017", "GPU0-m001", "gpu0-m01a", "gpu0-m001 ", strings.Repeat("gpu0-m001", 5)} {
		if _, err := ParseDeviceID(bad); !errors.Is(err, ErrDeviceID) {
			t.Errorf("ParseDeviceID(%q) err = %v", bad, err)
		}
	}
	shares, err := s.Shares([]string{"gpu1-m002", "gpu0-m000", "gpu1-m000", "gpu1-m002"})
	if err != nil || fmt.Sprint(shares) != "[{0 1 536870912} {1 2 1073741824}]" {
		t.Fatalf("shares = %v, %v", shares, err)
	}
	if _, err := s.Shares([]string{"gpu1-m003"}); !errors.Is(err, ErrDeviceID) || !strings.Contains(err.Error(), `"gpu1-m003" is not a device of this node`) {
		t.Fatalf("a unit past the GPU's memory: %v", err)
	}
	if _, err := s.Shares([]string{"gpu2-m000"}); !errors.Is(err, ErrDeviceID) {
		t.Fatalf("a GPU the node lacks: %v", err)
	}
}

func ids(gpu, from, to int) []string {
	var out []string
	for u := from; u < to; u++ {
		out = append(out, DeviceID{gpu, u}.String())
	}
	return out
}

func TestPreferredPacksOnOneGPU(t *testing.T) {
	avail := append(ids(0, 10, 58), ids(1, 0, 80)...) // gpu0: 48 free, gpu1: 80 free
	for _, tc := range []struct {
		name string
		must []string
		size int
		want []string
	}{
		{"fits both: the fuller GPU (best fit)", nil, 40, ids(0, 10, 50)},
		{"fits gpu1 only", nil, 60, ids(1, 0, 60)},
		{"fits neither: fewest GPUs, the emptier first", nil, 100, append(ids(1, 0, 80), ids(0, 10, 30)...)},
		{"must on gpu1 keeps the rest there", []string{"gpu1-m005"}, 4, append([]string{"gpu1-m005"}, "gpu1-m000", "gpu1-m001", "gpu1-m002")},
		{"exact fit", nil, 48, ids(0, 10, 58)},
	} {
		got := Preferred(avail, tc.must, tc.size)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := Preferred([]string{"x", "gpu0-m000"}, nil, 1); !slices.Equal(got, []string{"gpu0-m000"}) {
		t.Errorf("unknown ids: %v", got)
	}
}

func TestVisibleEnv(t *testing.T) {
	s := spec(t, Config{GPUs: []GPUConfig{{Memory: "8GiB"}, {Memory: "8GiB"}}})
	env := s.VisibleEnv([]Share{{GPU: 1}})
	if env[EnvCUDAVisibleDevices] != "1" || env[EnvNVIDIAVisibleDevices] != "1" || env[EnvCUDADeviceOrder] != "PCI_BUS_ID" || len(env) != 3 {
		t.Fatalf("by index: %v", env)
	}
	s = spec(t, Config{GPUs: []GPUConfig{{Memory: "8GiB", UUID: "GPU-aa"}, {Memory: "8GiB", UUID: "GPU-bb"}}})
	env = s.VisibleEnv([]Share{{GPU: 0}, {GPU: 1}})
	if env[EnvCUDAVisibleDevices] != "GPU-aa,GPU-bb" || env[EnvNVIDIAVisibleDevices] != "GPU-aa,GPU-bb" || len(env) != 2 {
		t.Fatalf("by UUID: %v", env)
	}
}
