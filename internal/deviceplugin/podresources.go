package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuext/gpuext/internal/admission"

	"github.com/gpuext/gpuext/internal/deviceplugin/pools"
)

// PodResources answers admission's question "what GPU memory did the
// scheduler give this container" from the kubelet's pod-resources API: the
// kubelet's own record of which devices of the resource it allocated to
// which container (namespace, pod and container names as the kubelet gave
// them to the runtime). It implements admission.GPUMemorySource.
//
// Why the kubelet and not the container: the pod writes its own env and
// annotations, so a value there (CUDA_VISIBLE_DEVICES, a copy of the
// request) could claim any amount. The pod-resources socket is the
// kubelet's, root-only on the host; the names admission looks up come from
// the runtime's sandbox and container metadata, which the kubelet sets.
type PodResources struct {
	spec    pools.Spec
	conn    *grpc.ClientConn
	client  podresourcesapi.PodResourcesListerClient
	Timeout time.Duration // of one List call (default 5s)
}

// MaxListBytes bounds the kubelet's answer (every pod of the node).
const MaxListBytes = 16 << 20

// ErrPodResources wraps errors asking the kubelet.
var ErrPodResources = errors.New("kubelet pod-resources")

// NewPodResources connects (lazily: the kubelet may start after the agent)
// to the pod-resources socket of spec.
func NewPodResources(spec pools.Spec) (*PodResources, error) {
	conn, err := grpc.NewClient("unix://"+spec.PodResourcesSocket(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxListBytes)))
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrPodResources, spec.PodResourcesSocket(), err)
	}
	return &PodResources{spec: spec, conn: conn, client: podresourcesapi.NewPodResourcesListerClient(conn),
		Timeout: 5 * time.Second}, nil
}

// Close closes the connection.
func (r *PodResources) Close() error { return r.conn.Close() }

// GPUMemory is the memory of the resource the kubelet allocated to the
// container (wholePod: to any container of its pod, each device once),
// per GPU. A pod the kubelet does not list (made through CRI by hand) has
// none. Devices of the resource that are not the node's are an error: the
// plugin never advertised them.
func (r *PodResources) GPUMemory(info admission.ContainerInfo, wholePod bool) (admission.GPUMemory, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.Timeout)
	defer cancel()
	resp, err := r.client.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return admission.GPUMemory{}, fmt.Errorf("%w %s: List: %w", ErrPodResources, r.spec.PodResourcesSocket(), err)
	}
	return r.fromList(resp, info, wholePod)
}

func (r *PodResources) fromList(resp *podresourcesapi.ListPodResourcesResponse, info admission.ContainerInfo, wholePod bool) (admission.GPUMemory, error) {
	gm := admission.GPUMemory{Resource: r.spec.Resource}
	var pod *podresourcesapi.PodResources
	for _, p := range resp.GetPodResources() {
		if p.GetNamespace() != info.PodNamespace || p.GetName() != info.PodName {
			continue
		}
		if pod != nil {
			// two pods of one name (one terminating): which devices are this one's is not known
			return gm, fmt.Errorf("%w: pod %s/%s is listed twice", ErrPodResources, info.PodNamespace, info.PodName)
		}
		pod = p
	}
	if pod == nil {
		return gm, nil
	}
	var own, all []string
	for _, c := range pod.GetContainers() {
		for _, d := range c.GetDevices() {
			if d.GetResourceName() != r.spec.Resource {
				continue
			}
			all = append(all, d.GetDeviceIds()...)
			if c.GetName() == info.Name {
				own = append(own, d.GetDeviceIds()...)
			}
		}
	}
	ids := own
	if wholePod {
		ids = all
	}
	shares, err := r.spec.Shares(ids)
	if err != nil {
		return gm, fmt.Errorf("%w: pod %s/%s: %w", ErrPodResources, info.PodNamespace, info.PodName, err)
	}
	ownShares, err := r.spec.Shares(own)
	if err != nil {
		return gm, fmt.Errorf("%w: pod %s/%s container %q: %w", ErrPodResources, info.PodNamespace, info.PodName, info.Name, err)
	}
	for _, s := range shares {
		gm.GPUs = append(gm.GPUs, admission.GPUShare{GPU: s.GPU, Bytes: s.Bytes})
	}
	for _, s := range ownShares {
		gm.ContainerGPUs = append(gm.ContainerGPUs, s.GPU)
	}
	slices.Sort(gm.ContainerGPUs)
	return gm, nil
}
