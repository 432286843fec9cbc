package deviceplugintest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
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
	dir   string
	srv   *grpc.Server
	got   chan Registered
	errs  chan error
	mu    sync.Mutex
	conns []*grpc.ClientConn
}

// ServeKubelet serves the registration socket in dir (replacing a stale
// one) until Stop: StartKubelet for a test, or a command that stands in for
// the kubelet on a real node (test/gpu/kubeletstub).
func ServeKubelet(dir string) (*Kubelet, error) {
	sock := filepath.Join(dir, "device-plugins", "kubelet.sock")
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	k := &Kubelet{dir: dir, srv: grpc.NewServer(), got: make(chan Registered, 4), errs: make(chan error, 4)}
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(l) }()
	return k, nil
}

// StartKubelet is ServeKubelet until Stop or the end of the test.
func StartKubelet(t testing.TB, dir string) *Kubelet {
	t.Helper()
	k, err := ServeKubelet(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	return k
}

// Stop stops serving (a kubelet going down) and closes its plugin clients.
func (k *Kubelet) Stop() {
	k.srv.Stop()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range k.conns {
		c.Close()
	}
	k.conns = nil
}

func (k *Kubelet) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	go k.connect(req) // the kubelet answers first, then dials the plugin
	return &pluginapi.Empty{}, nil
}

func (k *Kubelet) connect(req *pluginapi.RegisterRequest) {
	r, err := k.dial(req)
	if err != nil {
		k.errs <- fmt.Errorf("plugin %q at %q: %w", req.GetResourceName(), req.GetEndpoint(), err)
		return
	}
	k.got <- r
}

func (k *Kubelet) dial(req *pluginapi.RegisterRequest) (Registered, error) {
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.dir, "device-plugins", req.GetEndpoint()),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return Registered{}, err
	}
	k.mu.Lock()
	k.conns = append(k.conns, conn)
	k.mu.Unlock()
	c := pluginapi.NewDevicePluginClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	opts, err := c.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil {
		return Registered{}, err
	}
	stream, err := c.ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		return Registered{}, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return Registered{}, err
	}
	return Registered{Request: req, Options: opts, Devices: resp.GetDevices(), Client: c}, nil
}

// Next returns the next registration, or an error when the kubelet could
// not read the plugin that registered, or none registered within timeout.
func (k *Kubelet) Next(timeout time.Duration) (Registered, error) {
	select {
	case r := <-k.got:
		return r, nil
	case err := <-k.errs:
		return Registered{}, err
	case <-time.After(timeout):
		return Registered{}, fmt.Errorf("no device plugin registered within %s", timeout)
	}
}

// Wait returns the next registration, failing the test after 15s.
func (k *Kubelet) Wait(t testing.TB) Registered {
	t.Helper()
	r, err := k.Next(15 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
