package deviceplugin

// The plugin over its real gRPC unix socket, against a kubelet side that
// the test runs (deviceplugintest.Kubelet): the registration service on
// <kubeletDir>/device-plugins/kubelet.sock, which, as the kubelet's device
// manager does, dials the endpoint a plugin registers and reads its options
// and its ListAndWatch stream.

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpuext/gpuext/internal/deviceplugin/deviceplugintest"

	"github.com/gpuext/gpuext/internal/deviceplugin/pools"
)

func kubeletDir(t *testing.T) string { return deviceplugintest.KubeletDir(t) }

func startKubelet(t *testing.T, dir string) *deviceplugintest.Kubelet {
	return deviceplugintest.StartKubelet(t, dir)
}

func runPlugin(t *testing.T, dir string, cfg pools.Config) *Plugin {
	t.Helper()
	cfg.KubeletDir = dir
	lg := logrus.New()
	lg.SetOutput(&strings.Builder{})
	p, err := New(spec(t, cfg), logrus.NewEntry(lg))
	if err != nil {
		t.Fatal(err)
	}
	p.WatchInterval, p.RetryInterval = 20*time.Millisecond, 100*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return p
}

var twoGPUs = pools.Config{GPUs: []pools.GPUConfig{{Memory: "48GiB"}, {Memory: "80GiB"}}}

func TestRegistersAndListsOneDevicePerUnit(t *testing.T) {
	dir := kubeletDir(t)
	k := startKubelet(t, dir)
	runPlugin(t, dir, twoGPUs)
	r := k.Wait(t)
	if r.Request.GetVersion() != "v1beta1" || r.Request.GetResourceName() != "gpuext.io/gpu-memory" || r.Request.GetEndpoint() != pools.SocketName ||
		!r.Request.GetOptions().GetGetPreferredAllocationAvailable() || !r.Options.GetGetPreferredAllocationAvailable() || r.Options.GetPreStartRequired() {
		t.Fatalf("registration %+v, options %+v", r.Request, r.Options)
	}
	if len(r.Devices) != 48+80 {
		t.Fatalf("%d devices, want 128 (48GiB + 80GiB in 1GiB units)", len(r.Devices))
	}
	var names []string
	for _, d := range r.Devices {
		if d.GetHealth() != pluginapi.Healthy {
			t.Fatalf("device %v not healthy", d)
		}
		names = append(names, d.GetID())
	}
	if names[0] != "gpu0-m000" || names[47] != "gpu0-m047" || names[48] != "gpu1-m000" || names[127] != "gpu1-m079" {
		t.Fatalf("device ids %v", names)
	}

	ctx := context.Background()
	// Allocate binds each container to the GPUs of its units: their CDI
	// names (NVIDIA's, by index, by default) and no host index in the env
	resp, err := r.Client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"gpu1-m003", "gpu1-m004"}}, {DevicesIds: []string{"gpu0-m000", "gpu1-m000"}}}})
	if err != nil {
		t.Fatal(err)
	}
	c0, c1 := resp.GetContainerResponses()[0], resp.GetContainerResponses()[1]
	if got := cdiNames(c0); !slices.Equal(got, []string{"nvidia.com/gpu=1"}) {
		t.Fatalf("CDI devices of 2 units on gpu1: %q", got)
	}
	if got := cdiNames(c1); !slices.Equal(got, []string{"nvidia.com/gpu=0", "nvidia.com/gpu=1"}) {
		t.Fatalf("CDI devices of units on gpu0 and gpu1: %q", got)
	}
	if env := c0.GetEnvs(); !maps.Equal(env, map[string]string{"NVIDIA_VISIBLE_DEVICES": "void", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}) {
		t.Fatalf("env of 2 units on gpu1 (no UUIDs known): %v", env)
	}
	_, err = r.Client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"gpu1-m080"}}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"gpu1-m080" is not a device of this node`) {
		t.Fatalf("a device the plugin never listed: %v", err)
	}

	// preferred allocation packs on one GPU
	pref, err := r.Client.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: names, AllocationSize: 40}, {AvailableDeviceIDs: names, AllocationSize: 60}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := pref.GetContainerResponses()[0].GetDeviceIDs(); !slices.Equal(got, ids(0, 0, 40)) {
		t.Fatalf("40 units: %v, want gpu0's first 40", got)
	}
	if got := pref.GetContainerResponses()[1].GetDeviceIDs(); !slices.Equal(got, ids(1, 0, 60)) {
		t.Fatalf("60 units: %v, want gpu1's first 60", got)
	}
	if _, err := r.Client.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: []string{"gpu0-m000"}}); err != nil {
		t.Fatal(err)
	}
}

// A kubelet restart recreates kubelet.sock and removes the plugins'
// sockets: the plugin serves a new socket and registers again.
func TestRegistersAgainWhenTheKubeletRestarts(t *testing.T) {
	dir := kubeletDir(t)
	k := startKubelet(t, dir)
	runPlugin(t, dir, pools.Config{Unit: "256MiB", GPUs: []pools.GPUConfig{{Memory: "2GiB", UUID: "GPU-0a"}}})
	first := k.Wait(t)
	if len(first.Devices) != 8 {
		t.Fatalf("%d devices, want 8 (2GiB in 256MiB units)", len(first.Devices))
	}
	k.Stop()
	for _, f := range []string{"kubelet.sock", pools.SocketName} { // what the kubelet's device manager does at start
		_ = os.Remove(filepath.Join(dir, "device-plugins", f))
	}
	k2 := startKubelet(t, dir)
	again := k2.Wait(t)
	if again.Request.GetResourceName() != "gpuext.io/gpu-memory" || len(again.Devices) != 8 {
		t.Fatalf("second registration: %+v, %d devices", again.Request, len(again.Devices))
	}
	resp, err := again.Client.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"gpu0-m007"}}}})
	if err != nil || resp.GetContainerResponses()[0].GetEnvs()["CUDA_VISIBLE_DEVICES"] != "GPU-0a" {
		t.Fatalf("allocate after re-registration: %v, %v", resp, err)
	}
	// only the kubelet.sock replaced (the plugin's socket left in place): registers again too
	k2.Stop()
	_ = os.Remove(filepath.Join(dir, "device-plugins", "kubelet.sock"))
	k3 := startKubelet(t, dir)
	k3.Wait(t)
}

// Without a kubelet the plugin keeps trying, and registers once one is there.
func TestRegistersWhenTheKubeletComesLater(t *testing.T) {
	dir := kubeletDir(t)
	runPlugin(t, dir, twoGPUs)
	time.Sleep(300 * time.Millisecond)
	k := startKubelet(t, dir)
	if r := k.Wait(t); len(r.Devices) != 128 {
		t.Fatalf("%d devices", len(r.Devices))
	}
}

func cdiNames(r *pluginapi.ContainerAllocateResponse) []string {
	var out []string
	for _, d := range r.GetCdiDevices() {
		out = append(out, d.GetName())
	}
	return out
}

// Allocate's answer for each CDI setting, as the kubelet receives it: the
// CDI devices it passes to the runtime and the env it sets.
func TestAllocateResponse(t *testing.T) {
	off := false
	uuids := []pools.GPUConfig{{Memory: "4GiB", UUID: "GPU-0a"}, {Memory: "4GiB", UUID: "GPU-1b"}}
	plain := []pools.GPUConfig{{Memory: "4GiB"}, {Memory: "4GiB"}}
	for _, tc := range []struct {
		name string
		cfg  pools.Config
		cdi  []string
		env  map[string]string
	}{
		{"default, UUIDs known", pools.Config{GPUs: uuids}, []string{"nvidia.com/gpu=1"},
			map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-1b", "NVIDIA_VISIBLE_DEVICES": "void", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}},
		{"default, no UUIDs", pools.Config{GPUs: plain}, []string{"nvidia.com/gpu=1"},
			map[string]string{"NVIDIA_VISIBLE_DEVICES": "void", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}},
		{"by uuid", pools.Config{GPUs: uuids, CDI: &pools.CDIConfig{DeviceNameStrategy: "uuid"}}, []string{"nvidia.com/gpu=GPU-1b"},
			map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-1b", "NVIDIA_VISIBLE_DEVICES": "void", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}},
		{"another kind", pools.Config{GPUs: plain, CDI: &pools.CDIConfig{Kind: "example.com/gpu"}}, []string{"example.com/gpu=1"},
			map[string]string{"NVIDIA_VISIBLE_DEVICES": "void", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}},
		{"off: the env fallback", pools.Config{GPUs: plain, CDI: &pools.CDIConfig{Enabled: &off}}, nil,
			map[string]string{"CUDA_VISIBLE_DEVICES": "1", "NVIDIA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := kubeletDir(t)
			k := startKubelet(t, dir)
			runPlugin(t, dir, tc.cfg)
			r := k.Wait(t)
			resp, err := r.Client.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
				{DevicesIds: []string{"gpu1-m000", "gpu1-m003"}}}})
			if err != nil {
				t.Fatal(err)
			}
			c := resp.GetContainerResponses()[0]
			if got := cdiNames(c); !slices.Equal(got, tc.cdi) {
				t.Errorf("CDI devices %q, want %q", got, tc.cdi)
			}
			if !maps.Equal(c.GetEnvs(), tc.env) {
				t.Errorf("env %v, want %v", c.GetEnvs(), tc.env)
			}
			if len(c.GetMounts()) != 0 || len(c.GetDevices()) != 0 || len(c.GetAnnotations()) != 0 {
				t.Errorf("mounts %v, devices %v, annotations %v: the runtime's CDI resolution gives those", c.GetMounts(), c.GetDevices(), c.GetAnnotations())
			}
		})
	}
}

// A plugin whose CDI names are UUIDs refuses GPUs it cannot name.
func TestNewRefusesUUIDNamesWithoutUUIDs(t *testing.T) {
	s := spec(t, pools.Config{CDI: &pools.CDIConfig{DeviceNameStrategy: "uuid"}}) // GPUs from NVML, later
	s.GPUs = []pools.GPU{{Index: 0, UUID: "GPU-0a", Memory: 1 << 30}, {Index: 1, Memory: 1 << 30}}
	if _, err := New(s, nil); !errors.Is(err, pools.ErrConfig) || !strings.Contains(err.Error(), `devicePlugin.cdi.deviceNameStrategy "uuid": GPU 1 has no UUID`) {
		t.Fatalf("New: %v", err)
	}
}
