package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/internal/deviceplugin/pools"
)

func TestDevicePluginSection(t *testing.T) {
	cfg, err := Parse([]byte(`{"devicePlugin": {"unit": "512MiB", "kubeletDir": "/var/lib/kubelet-lab", "gpus": [{"memory": "48GiB"}, {"memory": "80GiB", "uuid": "GPU-0a1b"}]}}`), "t")
	if err != nil {
		t.Fatal(err)
	}
	spec, ok := cfg.DevicePluginSpec()
	if !ok || spec.Resource != "gpuext.io/gpu-memory" || spec.Unit != 512<<20 || len(spec.DeviceIDs()) != 96+160 ||
		spec.RegistrationSocket() != "/var/lib/kubelet-lab/device-plugins/kubelet.sock" {
		t.Fatalf("spec %+v %v", spec, ok)
	}
	if !spec.CDI.Enabled || spec.CDI.Kind != "nvidia.com/gpu" || spec.CDI.DeviceNameStrategy != "index" {
		t.Fatalf("CDI by default: %+v, want on, NVIDIA's names by index", spec.CDI)
	}
	cfg, err = Parse([]byte(`{"devicePlugin": {"gpus": [{"memory": "8GiB"}], "cdi": {"enabled": false}}}`), "t")
	if spec, _ := cfg.DevicePluginSpec(); err != nil || spec.CDI.Enabled {
		t.Fatalf("cdi.enabled false: %+v, %v", spec.CDI, err)
	}
	if cfg, _ := Parse(nil, "t"); cfg.DevicePlugin != nil {
		t.Fatal("the device plugin is on by default")
	}
	for data, want := range map[string]string{
		`{"devicePlugin": {"unit": "128MiB"}}`:                                                    `config t: bad devicePlugin config: devicePlugin.unit "128MiB"`,
		`{"devicePlugin": {"gpus": [{"memory": "lots"}]}}`:                                        `devicePlugin.gpus[0].memory "lots"`,
		`{"devicePlugin": {"gpus": [{"memroy": "8GiB"}]}}`:                                        `memroy`,
		`{"devicePlugin": {"resource": "gpuext.io/gpu memory"}}`:                                  `devicePlugin.resource "gpuext.io/gpu memory"`,
		`{"devicePlugin": {"kubeletDir": "kubelet"}}`:                                             `devicePlugin.kubeletDir "kubelet": must be an absolute path`,
		`{"devicePlugin": {"cdi": {"kind": "nvidia.com"}}}`:                                       `devicePlugin.cdi.kind "nvidia.com": want VENDOR/CLASS`,
		`{"devicePlugin": {"cdi": {"deviceNameStrategy": "uuid"}, "gpus": [{"memory": "8GiB"}]}}`: `devicePlugin.cdi.deviceNameStrategy "uuid": GPU 0 has no UUID`,
		`{"devicePlugin": {"cdi": {"enable": false}}}`:                                            `enable`,
	} {
		_, err := Parse([]byte(data), "t")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", data, err, want)
		}
		if strings.Contains(want, "devicePlugin.") && !errors.Is(err, pools.ErrConfig) {
			t.Errorf("%s: not ErrConfig: %v", data, err)
		}
	}
}
