package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

func TestNVMLProcesses(t *testing.T) {
	dev := func(uuid string, procs ...nvml.ProcessInfo) *mock.Device {
		return &mock.Device{
			GetUUIDFunc:                    func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
			GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return procs, nvml.SUCCESS },
		}
	}
	devs := []*mock.Device{dev("GPU-a", nvml.ProcessInfo{Pid: 10, UsedGpuMemory: 1 << 30}), dev("GPU-b", nvml.ProcessInfo{Pid: 20, UsedGpuMemory: 2 << 30})}
	lib := &mock.Interface{
		InitFunc:           func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			return devs[i], nvml.SUCCESS
		},
	}
	procs, err := nvmlProcesses(lib)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 2 || procs[1].GPU != 1 || procs[1].UUID != "GPU-b" || procs[1].PID != 20 || procs[1].UsedBytes != 2<<30 {
		t.Fatalf("processes = %+v", procs)
	}
}

func TestNoDriverIsAClearError(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	if _, err := nvmlProcesses(lib); !errors.Is(err, ErrNoDriver) {
		t.Fatalf("err = %v, want ErrNoDriver", err)
	}
}

func TestListGPUs(t *testing.T) {
	dev := func(uuid string, total uint64, bus string) *mock.Device {
		return &mock.Device{
			GetUUIDFunc:       func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
			GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: total}, nvml.SUCCESS },
			GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) {
				if bus == "" {
					return nvml.PciInfo{}, nvml.ERROR_NOT_SUPPORTED
				}
				var p nvml.PciInfo
				for i := range bus {
					p.BusId[i] = int8(bus[i])
				}
				return p, nvml.SUCCESS
			},
		}
	}
	devs := []*mock.Device{dev("GPU-a", 143771<<20, "00000000:17:00.0"), dev("GPU-b", 80<<30, "")}
	lib := &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) { return devs[i], nvml.SUCCESS },
	}
	var out strings.Builder
	if err := listGPUs(lib, true, &out); err != nil {
		t.Fatal(err)
	}
	want := `[{"index":0,"uuid":"GPU-a","memoryBytes":150754820096,"pciBusId":"00000000:17:00.0"},{"index":1,"uuid":"GPU-b","memoryBytes":85899345920}]` + "\n"
	if out.String() != want {
		t.Fatalf("--gpus --json = %s, want %s", out.String(), want)
	}
}
