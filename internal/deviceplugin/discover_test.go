package deviceplugin

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/internal/deviceplugin/pools"
)

func spec(t *testing.T, c pools.Config) pools.Spec {
	t.Helper()
	s, err := c.Validate()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ids(gpu, from, to int) []string {
	var out []string
	for u := from; u < to; u++ {
		out = append(out, pools.DeviceID{GPU: gpu, Unit: u}.String())
	}
	return out
}

func TestDiscoveredGPUs(t *testing.T) {
	s := spec(t, pools.Config{})
	got, err := withDiscovered(s, []byte(`[{"index":0,"uuid":"GPU-a1","memoryBytes":150754820096}]`))
	if err != nil || len(got.GPUs) != 1 || got.Units(got.GPUs[0]) != 140 || got.GPUs[0].UUID != "GPU-a1" {
		t.Fatalf("an H200 (143771 MiB) in 1GiB units: %+v, %v", got.GPUs, err)
	}
	for _, bad := range []string{`[]`, `[{"index":1,"memoryBytes":1073741824}]`, `[{"index":0,"memoryBytes":1}]`,
		`[{"index":0,"memoryBytes":1073741824,"extra":1}]`, `[{"index":0,"uuid":"x","memoryBytes":1073741824}]`, `{}`} {
		if _, err := withDiscovered(s, []byte(bad)); !errors.Is(err, ErrDiscover) {
			t.Errorf("%s: err = %v", bad, err)
		}
	}
	// CDI names by UUID: NVML must report each GPU's
	byUUID := spec(t, pools.Config{CDI: &pools.CDIConfig{DeviceNameStrategy: "uuid"}})
	if got, err := withDiscovered(byUUID, []byte(`[{"index":0,"uuid":"GPU-a1","memoryBytes":1073741824}]`)); err != nil || got.GPUs[0].UUID != "GPU-a1" {
		t.Fatalf("by uuid, with one: %+v, %v", got.GPUs, err)
	}
	_, err = withDiscovered(byUUID, []byte(`[{"index":0,"uuid":"GPU-a1","memoryBytes":1073741824},{"index":1,"memoryBytes":1073741824}]`))
	if !errors.Is(err, pools.ErrConfig) || !strings.Contains(err.Error(), `devicePlugin.cdi.deviceNameStrategy "uuid": GPU 1 has no UUID`) {
		t.Fatalf("by uuid, GPU 1 without: %v", err)
	}
}
