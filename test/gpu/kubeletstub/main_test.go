package main

// What the multi-gpu section of make gpu-test parses (test/gpu/multi_gpu.sh)
// is what the stub prints for the real device plugin: its devices per GPU,
// a preferred allocation on one GPU, and Allocate's env and CDI names.

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/internal/deviceplugin"
	"github.com/gpuext/gpuext/internal/deviceplugin/deviceplugintest"
	"github.com/gpuext/gpuext/internal/deviceplugin/pools"
)

func TestStubReadsTheDevicePlugin(t *testing.T) {
	dir := deviceplugintest.KubeletDir(t)
	const gpu0, gpu1 = "GPU-11111111-2222-3333-4444-555555555555", "GPU-11111111-2222-3333-4444-666666666666"
	spec, err := pools.Config{KubeletDir: dir, GPUs: []pools.GPUConfig{{Memory: "3GiB", UUID: gpu0}, {Memory: "2GiB", UUID: gpu1}}}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	lg := logrus.New()
	lg.SetOutput(&strings.Builder{})
	p, err := deviceplugin.New(spec, logrus.NewEntry(lg))
	if err != nil {
		t.Fatal(err)
	}
	p.WatchInterval, p.RetryInterval = 20*time.Millisecond, 50*time.Millisecond // registers with each stub that starts
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	var out bytes.Buffer
	if err := run(dir, 15*time.Second, 2, []string{"gpu1-m000,gpu1-m001", "gpu0-m002,gpu1-m000"}, &out); err != nil {
		t.Fatal(err)
	}
	var a Answer
	if err := json.Unmarshal(out.Bytes(), &a); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	want := []string{"gpu0-m000", "gpu0-m001", "gpu0-m002", "gpu1-m000", "gpu1-m001"}
	if a.Resource != "gpuext.io/gpu-memory" || !slices.Equal(a.Devices, want) || len(a.Unhealthy) != 0 {
		t.Errorf("resource %q devices %v unhealthy %v, want %v all healthy", a.Resource, a.Devices, a.Unhealthy, want)
	}
	if len(a.Preferred) != 2 || a.Preferred[0][:4] != a.Preferred[1][:4] {
		t.Errorf("preferred %v: want 2 units on one GPU", a.Preferred)
	}
	if len(a.Allocations) != 2 {
		t.Fatalf("allocations %+v, want 2", a.Allocations)
	}
	one, two := a.Allocations[0], a.Allocations[1]
	if one.Envs["CUDA_VISIBLE_DEVICES"] != gpu1 || one.Envs["CUDA_DEVICE_ORDER"] != "PCI_BUS_ID" || !slices.Equal(one.CDIDevices, []string{"nvidia.com/gpu=1"}) {
		t.Errorf("GPU 1's units: %+v, want CUDA_VISIBLE_DEVICES=%s, PCI_BUS_ID, nvidia.com/gpu=1", one, gpu1)
	}
	if two.Envs["CUDA_VISIBLE_DEVICES"] != gpu0+","+gpu1 || !slices.Equal(two.CDIDevices, []string{"nvidia.com/gpu=0", "nvidia.com/gpu=1"}) {
		t.Errorf("units on both GPUs: %+v, want both UUIDs and CDI names", two)
	}
	// a device id the plugin does not have: Allocate's refusal names it
	out.Reset()
	err = run(dir, 5*time.Second, 0, []string{"gpu7-m000"}, &out)
	if err == nil || !strings.Contains(err.Error(), "gpu7-m000") {
		t.Errorf("Allocate of gpu7-m000: %v, want an error naming it", err)
	}
}
