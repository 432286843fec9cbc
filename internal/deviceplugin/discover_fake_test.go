package deviceplugin

import (
	"context"
	"fmt"
	"testing"

	"github.com/gpuext/gpuext/internal/deviceplugin/pools"
	"github.com/gpuext/gpuext/lib/testutil"
)

// TestDiscoverOverFakeNVML runs the agent's real discovery chain where no
// GPU is: Discover runs gpuext-gpuview --gpus --json (built with cgo, as make
// build does) over the repo's fake libnvidia-ml.so.1 (devrt/build.sh), and
// the node's pools and CDI names come from what the fake reports: two GPUs
// of 24 GiB with their UUIDs. On the GPU machine the same chain met the
// H100's NVML (make gpu-node, docs/gpu-node.md).
func TestDiscoverOverFakeNVML(t *testing.T) {
	bin, fake := testutil.BuildGpuviewOverFake(t)
	t.Setenv("LD_LIBRARY_PATH", fake)
	t.Setenv("FAKECUDA_DEVICES", "2")
	t.Setenv("FAKECUDA_TOTAL_BYTES", "25769803776")

	s := spec(t, pools.Config{Gpuview: bin, CDI: &pools.CDIConfig{DeviceNameStrategy: "uuid"}})
	got, err := Discover(context.Background(), s)
	if err != nil {
		t.Fatalf("Discover over the fake NVML: %v", err)
	}
	if len(got.GPUs) != 2 {
		t.Fatalf("GPUs = %+v, want the fake's 2", got.GPUs)
	}
	for i, g := range got.GPUs {
		if g.Index != i || g.Memory != 24<<30 || got.Units(g) != 24 || g.UUID == "" {
			t.Errorf("GPU %d = %+v (%d units), want index %d, 24 GiB in 24 units and its UUID", i, g, got.Units(g), i)
		}
		// the fake's bus ids, in NVML's form: the dmem region's name comes from them
		if want := fmt.Sprintf("00000000:%02X:00.0", 0x10+i); g.PCIBusID != want {
			t.Errorf("GPU %d PCI bus id %q, want %q", i, g.PCIBusID, want)
		}
	}
	names, err := got.CDIDevices([]pools.Share{{GPU: 1, Bytes: 4 << 30}})
	if err != nil || len(names) != 1 || names[0] != "nvidia.com/gpu="+got.GPUs[1].UUID {
		t.Errorf("CDI names for GPU 1 = %v, %v; want nvidia.com/gpu=%s", names, err, got.GPUs[1].UUID)
	}

	// a node without the driver: discovery fails, naming the reason
	t.Setenv("LD_LIBRARY_PATH", t.TempDir())
	if _, err := Discover(context.Background(), s); err == nil {
		t.Error("Discover without libnvidia-ml: no error")
	}
}
