package deviceplugintest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// KubeletDir is a short temporary directory for the kubelet's sockets (a
// t.TempDir path can exceed the unix socket limit), removed when the test ends.
func KubeletDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "deviceplugin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.MkdirAll(filepath.Join(dir, "device-plugins"), 0o750); err != nil {
		t.Fatal(err)
	}
	return dir
}

// PodResourcesServer is the kubelet's pod-resources API as a test serves
// it on <kubeletDir>/pod-resources/kubelet.sock: List answers with Pods.
type PodResourcesServer struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	mu    sync.Mutex
	pods  []*podresourcesapi.PodResources
	Calls int
}

// ServePodResources serves the API in dir until the test ends.
func ServePodResources(t testing.TB, dir string) *PodResourcesServer {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "pod-resources"), 0o750); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, "pod-resources", "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	s := &PodResourcesServer{}
	srv := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(srv, s)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return s
}

// SetPods replaces what List answers.
func (s *PodResourcesServer) SetPods(pods ...*podresourcesapi.PodResources) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods = pods
}

func (s *PodResourcesServer) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Calls++
	return &podresourcesapi.ListPodResourcesResponse{PodResources: s.pods}, nil
}

// Pod is a pod of the List answer: containers by name, each with device ids of resources.
func Pod(namespace, name string, containers map[string]map[string][]string) *podresourcesapi.PodResources {
	p := &podresourcesapi.PodResources{Namespace: namespace, Name: name}
	for cname, res := range containers {
		c := &podresourcesapi.ContainerResources{Name: cname}
		for r, ids := range res {
			c.Devices = append(c.Devices, &podresourcesapi.ContainerDevices{ResourceName: r, DeviceIds: ids})
		}
		p.Containers = append(p.Containers, c)
	}
	return p
}
