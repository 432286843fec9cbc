module github.com/gpuext/gpuext

go 1.26.8

require (
	github.com/NVIDIA/go-nvml v0.13.4-1 // indirect
	github.com/cilium/ebpf v0.22.0 // indirect
	github.com/containerd/nri v0.12.5 // indirect
	github.com/opencontainers/runtime-spec v1.3.0 // indirect
	github.com/sirupsen/logrus v1.10.2 // indirect
	golang.org/x/sys v0.43.0 // indirect
)

tool github.com/cilium/ebpf/cmd/bpf2go
