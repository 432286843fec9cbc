package deviceplugin

// The plugin over its real gRPC unix socket, against a kubelet side that
// the test runs: the registration service on <kubeletDir>/device-plugins/kubelet.sock,
// which, as the kubelet's device manager does, dials the endpoint a plugin
// registers and reads its options and its ListAndWatch stream.

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpuext/gpuext/internal/deviceplugin/deviceplugintest"

	"github.com/gpuext/gpuext/internal/deviceplugin/pools"
)

func kubeletDir(t *testing.T) string { return deviceplugintest.KubeletDir(t) }

// registered is what the test kubelet learned from one registration.
type registered struct {
	req     *pluginapi.RegisterRequest
	options *pluginapi.DevicePluginOptions
	devices []*pluginapi.Device
	client  pluginapi.DevicePluginClient
}

// testKubelet is the kubelet's side of Register.
type testKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	dir string
	srv *grpc.Server
	got chan registered
	t   *testing.T
}

func startKubelet(t *testing.T, dir string) *testKubelet {
	t.Helper()
	sock := filepath.Join(dir, "device-plugins", "kubelet.sock")
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	k := &testKubelet{dir: dir, srv: grpc.NewServer(), got: make(chan registered, 4), t: t}
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(l) }()
	t.Cleanup(k.srv.Stop)
	return k
}

func (k *testKubelet) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	go k.connect(req) // the kubelet answers first, then dials the plugin
	return &pluginapi.Empty{}, nil
}

func (k *testKubelet) connect(req *pluginapi.RegisterRequest) {
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.dir, "device-plugins", req.GetEndpoint()),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		k.t.Error(err)
		return
	}
	k.t.Cleanup(func() { conn.Close() })
	c := pluginapi.NewDevicePluginClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	opts, err := c.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil {
		k.t.Error(err)
		return
	}
	stream, err := c.ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		k.t.Error(err)
		return
	}
	resp, err := stream.Recv()
	if err != nil {
		k.t.Error(err)
		return
	}
	k.got <- registered{req: req, options: opts, devices: resp.GetDevices(), client: c}
}

func (k *testKubelet) wait(t *testing.T) registered {
	t.Helper()
	select {
	case r := <-k.got:
		return r
	case <-time.After(15 * time.Second):
		t.Fatal("the plugin did not register within 15s")
	}
	return registered{}
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
	r := k.wait(t)
	if r.req.GetVersion() != "v1beta1" || r.req.GetResourceName() != "gpuext.io/gpu-memory" || r.req.GetEndpoint() != pools.SocketName ||
		!r.req.GetOptions().GetGetPreferredAllocationAvailable() || !r.options.GetGetPreferredAllocationAvailable() || r.options.GetPreStartRequired() {
		t.Fatalf("registration %+v, options %+v", r.req, r.options)
	}
	if len(r.devices) != 48+80 {
		t.Fatalf("%d devices, want 128 (48GiB + 80GiB in 1GiB units)", len(r.devices))
	}
	var names []string
	for _, d := range r.devices {
		if d.GetHealth() != pluginapi.Healthy {
			t.Fatalf("device %v not healthy", d)
		}
		names = append(names, d.GetID())
	}
	if names[0] != "gpu0-m000" || names[47] != "gpu0-m047" || names[48] != "gpu1-m000" || names[127] != "gpu1-m079" {
		t.Fatalf("device ids %v", names)
	}

	ctx := context.Background()
	// Allocate binds the container to the GPU of its units
	resp, err := r.client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"gpu1-m003", "gpu1-m004"}}, {DevicesIds: []string{"gpu0-m000", "gpu1-m000"}}}})
	if err != nil {
		t.Fatal(err)
	}
	env0, env1 := resp.GetContainerResponses()[0].GetEnvs(), resp.GetContainerResponses()[1].GetEnvs()
	if env0["CUDA_VISIBLE_DEVICES"] != "1" || env0["NVIDIA_VISIBLE_DEVICES"] != "1" || env0["CUDA_DEVICE_ORDER"] != "PCI_BUS_ID" {
		t.Fatalf("env of 2 units on gpu1: %v", env0)
	}
	if env1["CUDA_VISIBLE_DEVICES"] != "0,1" {
		t.Fatalf("env of units on gpu0 and gpu1: %v", env1)
	}
	_, err = r.client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"gpu1-m080"}}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"gpu1-m080" is not a device of this node`) {
		t.Fatalf("a device the plugin never listed: %v", err)
	}

	// preferred allocation packs on one GPU
	pref, err := r.client.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
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
	if _, err := r.client.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: []string{"gpu0-m000"}}); err != nil {
		t.Fatal(err)
	}
}

// A kubelet restart recreates kubelet.sock and removes the plugins'
// sockets: the plugin serves a new socket and registers again.
func TestRegistersAgainWhenTheKubeletRestarts(t *testing.T) {
	dir := kubeletDir(t)
	k := startKubelet(t, dir)
	runPlugin(t, dir, pools.Config{Unit: "256MiB", GPUs: []pools.GPUConfig{{Memory: "2GiB", UUID: "GPU-0a"}}})
	first := k.wait(t)
	if len(first.devices) != 8 {
		t.Fatalf("%d devices, want 8 (2GiB in 256MiB units)", len(first.devices))
	}
	k.srv.Stop()
	for _, f := range []string{"kubelet.sock", pools.SocketName} { // what the kubelet's device manager does at start
		_ = os.Remove(filepath.Join(dir, "device-plugins", f))
	}
	k2 := startKubelet(t, dir)
	again := k2.wait(t)
	if again.req.GetResourceName() != "gpuext.io/gpu-memory" || len(again.devices) != 8 {
		t.Fatalf("second registration: %+v, %d devices", again.req, len(again.devices))
	}
	resp, err := again.client.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"gpu0-m007"}}}})
	if err != nil || resp.GetContainerResponses()[0].GetEnvs()["CUDA_VISIBLE_DEVICES"] != "GPU-0a" {
		t.Fatalf("allocate after re-registration: %v, %v", resp, err)
	}
	// only the kubelet.sock replaced (the plugin's socket left in place): registers again too
	k2.srv.Stop()
	_ = os.Remove(filepath.Join(dir, "device-plugins", "kubelet.sock"))
	k3 := startKubelet(t, dir)
	k3.wait(t)
}

// Without a kubelet the plugin keeps trying, and registers once one is there.
func TestRegistersWhenTheKubeletComesLater(t *testing.T) {
	dir := kubeletDir(t)
	runPlugin(t, dir, twoGPUs)
	time.Sleep(300 * time.Millisecond)
	k := startKubelet(t, dir)
	if r := k.wait(t); len(r.devices) != 128 {
		t.Fatalf("%d devices", len(r.devices))
	}
}
