package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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

// GPUs are the node's GPUs this client maps devices to (configured or discovered).
func (p *PodResources) GPUs() []pools.GPU { return p.spec.GPUs }

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
// none. A pod listed twice (one terminating) is answered when both
// listings hold the same devices, and an error otherwise. Devices of the resource that are not the node's are an error: the
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
	var found []admission.GPUMemory
	for _, p := range resp.GetPodResources() {
		if p.GetNamespace() != info.PodNamespace || p.GetName() != info.PodName {
			continue
		}
		gm, err := r.podMemory(p, info, wholePod)
		if err != nil {
			return admission.GPUMemory{Resource: r.spec.Resource}, err
		}
		found = append(found, gm)
	}
	switch {
	case len(found) == 0:
		return admission.GPUMemory{Resource: r.spec.Resource}, nil
	case len(found) > 1 && !slices.ContainsFunc(found[1:], func(g admission.GPUMemory) bool { return !sameMemory(g, found[0]) }):
		return found[0], nil // listed twice (one terminating), the same devices: no doubt
	case len(found) > 1:
		// two pods of one name with other devices (one terminating, a pod
		// force-deleted and made again): which are this one's is not known
		return admission.GPUMemory{Resource: r.spec.Resource}, fmt.Errorf("%w: pod %s/%s is listed %d times with other %s devices",
			ErrPodResources, info.PodNamespace, info.PodName, len(found), r.spec.Resource)
	}
	return found[0], nil
}

func sameMemory(a, b admission.GPUMemory) bool {
	return slices.Equal(a.GPUs, b.GPUs) && slices.Equal(a.ContainerGPUs, b.ContainerGPUs)
}

// podMemory is the memory of the resource one listed pod holds for the
// container (wholePod: for any of its containers).
func (r *PodResources) podMemory(pod *podresourcesapi.PodResources, info admission.ContainerInfo, wholePod bool) (admission.GPUMemory, error) {
	gm := admission.GPUMemory{Resource: r.spec.Resource}
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

// GPUMemoryFloor is the least GPU memory the scheduler can have given the
// container, for when the kubelet cannot say how much (admission, fail-open):
// one unit on each of the node's GPUs its visible-devices env names. That
// env is what Allocate set (pools.Spec.VisibleEnv; the kubelet puts a device
// plugin's env over the pod's own), so a container given the resource
// always has it; a pod that writes it without the resource only narrows
// itself. ok is false when the env names none of the node's GPUs.
func (r *PodResources) GPUMemoryFloor(info admission.ContainerInfo) (admission.GPUMemory, bool) {
	var list string
	for _, key := range []string{pools.EnvCUDAVisibleDevices, pools.EnvNVIDIAVisibleDevices} {
		for _, kv := range info.Env { // the last one wins, as in the process
			if v, ok := strings.CutPrefix(kv, key+"="); ok {
				list = v
			}
		}
		if list != "" {
			break
		}
	}
	gm := admission.GPUMemory{Resource: r.spec.Resource}
	seen := map[int]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		for _, g := range r.spec.GPUs {
			if (g.UUID != "" && name == g.UUID) || name == strconv.Itoa(g.Index) {
				if !seen[g.Index] {
					seen[g.Index] = true
					gm.GPUs = append(gm.GPUs, admission.GPUShare{GPU: g.Index, Bytes: r.spec.Unit})
				}
			}
		}
	}
	if len(gm.GPUs) == 0 {
		return gm, false
	}
	slices.SortFunc(gm.GPUs, func(a, b admission.GPUShare) int { return a.GPU - b.GPU })
	for _, s := range gm.GPUs {
		gm.ContainerGPUs = append(gm.ContainerGPUs, s.GPU)
	}
	return gm, true
}
