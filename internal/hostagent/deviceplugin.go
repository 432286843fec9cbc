package hostagent

import (
	"context"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/internal/deviceplugin"
	"github.com/gpuext/gpuext/internal/deviceplugin/pools"
)

// startDevicePlugin serves the kubelet device plugin of cfg.devicePlugin,
// once (docs/device-plugin.md), and hands every core the kubelet's
// pod-resources API as the source of its containers' GPU memory. The GPUs
// come from the config, or from NVML through gpuext-gpuview; when neither
// answers, nothing is advertised and admission still asks the kubelet (it
// then refuses devices this node never advertised). apply calls it before
// the core is shared.
func (a *Agent) startDevicePlugin(cfg config.Config, core *admission.Core) {
	spec, ok := cfg.DevicePluginSpec()
	spec.Gpuview = cfg.GpuviewBinary()
	if !ok {
		return
	}
	if a.podResources == nil {
		ctx, cancel := context.WithCancel(context.Background())
		log := a.Log().WithField("resource", spec.Resource)
		found, err := deviceplugin.Discover(ctx, spec)
		if err != nil {
			log.WithError(err).Error("device plugin: no GPUs to advertise")
		} else {
			spec = found
		}
		pr, err := deviceplugin.NewPodResources(spec)
		if err != nil {
			cancel()
			log.WithError(err).Error("device plugin: the kubelet's pod-resources API cannot be asked: GPU memory requests are not applied")
			return
		}
		a.podResources, a.stopDevicePlugin = pr, cancel
		if dp, err := deviceplugin.New(spec, a.Log()); err == nil {
			go func() {
				if err := dp.Run(ctx); err != nil {
					log.WithError(err).Error("device plugin stopped")
				}
			}()
		}
		log.WithFields(logrus.Fields{"kubeletDir": spec.KubeletDir, "gpus": len(spec.GPUs)}).Info("device plugin started")
	}
	core.SetGPUMemory(a.podResources)
	core.SetNodeGPUs(nodeGPUs(a.podResources.GPUs()))
}

// nodeGPUs are the discovered GPUs as the admission core takes them (their
// PCI bus ids find their cgroup dmem regions).
func nodeGPUs(gpus []pools.GPU) []admission.NodeGPU {
	out := make([]admission.NodeGPU, 0, len(gpus))
	for _, g := range gpus {
		out = append(out, admission.NodeGPU{Index: g.Index, UUID: g.UUID, PCIBusID: g.PCIBusID})
	}
	return out
}

// stopDevicePluginLocked (a.mu held) stops the device plugin (its socket is removed;
// the kubelet keeps the node's allocations) and the pod-resources client.
func (a *Agent) stopDevicePluginLocked() {
	if a.stopDevicePlugin != nil {
		a.stopDevicePlugin()
		a.stopDevicePlugin = nil
	}
	if a.podResources != nil {
		_ = a.podResources.Close()
		a.podResources = nil
	}
}
