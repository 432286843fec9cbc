// Package deviceplugin makes a node's GPU memory something the Kubernetes
// scheduler can count: the host agent serves a kubelet device plugin
// (k8s.io/kubelet deviceplugin v1beta1) for the extended resource
// gpuext.io/gpu-memory, one device per unit of memory (1GiB by default), so
// `resources.limits: {gpuext.io/gpu-memory: 48}` is 48 GiB and the scheduler
// never places more than a node has.
//
// It owns:
//
//   - the node's pools (the pools subpackage, without gRPC so that
//     internal/config can decode the section): each GPU is a pool of units
//     whose device ids name their GPU ("gpu1-m017": GPU 1, unit 17); the
//     GPUs' memory comes from the config, or from NVML through
//     gpuext-gpuview when the config names none (discover.go: the agent is
//     static and has no cgo);
//   - the plugin (server.go): its gRPC socket in the kubelet's
//     device-plugins directory, registration, ListAndWatch, packing a
//     container's units on one GPU (GetPreferredAllocation), the CDI
//     device names and env of Allocate (the runtime gives the container
//     those GPUs' device nodes and driver files from the node's CDI spec),
//     and registering again when the kubelet restarts;
//   - the trusted answer to "what did the scheduler give this container"
//     (podresources.go): the kubelet's pod-resources API, asked at
//     admission; internal/admission turns the answer into the tenant's
//     per-GPU quota. Nothing the pod writes (env, annotations) is read for it.
//
// docs/device-plugin.md says what a user writes and why the quota comes from
// the kubelet.
package deviceplugin
