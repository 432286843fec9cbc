package deviceplugintest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Registered is what the test kubelet learned from one registration: the
// request, the plugin's options, the devices of its first ListAndWatch
// answer, and a client of the plugin (Allocate, as the kubelet calls it).
type Registered struct {
	Request *pluginapi.RegisterRequest
	Options *pluginapi.DevicePluginOptions
	Devices []*pluginapi.Device
	Client  pluginapi.DevicePluginClient
}

// Kubelet is the kubelet's side of device plugin registration, served on
// <kubeletDir>/device-plugins/kubelet.sock: as the kubelet's device manager
// does, it answers Register, then dials the endpoint the plugin named and
// reads its options and its ListAndWatch stream.
type Kubelet struct {
	pluginapi.UnimplementedRegistrationServer
	dir string
	srv *grpc.Server
	got chan Registered
	t   testing.TB
}

// StartKubelet serves the registration socket in dir (replacing a stale
// one) until Stop or the end of the test.
func StartKubelet(t testing.TB, dir string) *Kubelet {
	t.Helper()
	sock := filepath.Join(dir, "device-plugins", "kubelet.sock")
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	k := &Kubelet{dir: dir, srv: grpc.NewServer(), got: make(chan Registered, 4), t: t}
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(l) }()
	t.Cleanup(k.srv.Stop)
	return k
}

// Stop stops serving (a kubelet going down).
func (k *Kubelet) Stop() { k.srv.Stop() }

func (k *Kubelet) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	go k.connect(req) // the kubelet answers first, then dials the plugin
	return &pluginapi.Empty{}, nil
}

func (k *Kubelet) connect(req *pluginapi.RegisterRequest) {
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
	k.got <- Registered{Request: req, Options: opts, Devices: resp.GetDevices(), Client: c}
}

// Wait returns the next registration, failing the test after 15s.
func (k *Kubelet) Wait(t testing.TB) Registered {
	t.Helper()
	select {
	case r := <-k.got:
		return r
	case <-time.After(15 * time.Second):
		t.Fatal("the plugin did not register within 15s")
	}
	return Registered{}
}
