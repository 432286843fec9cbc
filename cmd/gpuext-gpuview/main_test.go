package main

import (
	"errors"
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
