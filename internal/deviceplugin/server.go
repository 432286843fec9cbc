package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpuext/gpuext/policies"

	"github.com/gpuext/gpuext/internal/deviceplugin/pools"
)

// Plugin is the device plugin of one node. Run serves it.
type Plugin struct {
	spec pools.Spec
	log  *logrus.Entry
	// WatchInterval is how often Run looks for a restarted kubelet (its
	// registration socket replaced, or the plugin's socket removed).
	WatchInterval time.Duration
	// RetryInterval is how long Run waits after a failed registration.
	RetryInterval time.Duration

	mu   sync.Mutex
	stop chan struct{} // closed when the server of the moment stops: ends its ListAndWatch streams
}

// New returns the plugin of a node whose GPUs spec lists.
func New(spec pools.Spec, log *logrus.Entry) (*Plugin, error) {
	if len(spec.GPUs) == 0 {
		return nil, fmt.Errorf("%w: no GPUs to advertise", pools.ErrConfig)
	}
	if err := spec.CheckDevices(); err != nil {
		return nil, err
	}
	if err := spec.CheckCDI(); err != nil {
		return nil, err
	}
	if log == nil {
		log = logrus.NewEntry(logrus.StandardLogger())
	}
	return &Plugin{spec: spec, log: log.WithField("resource", spec.Resource), WatchInterval: time.Second,
		RetryInterval: 5 * time.Second}, nil
}

// Spec is what the plugin serves.
func (p *Plugin) Spec() pools.Spec { return p.spec }

// Run serves the plugin until ctx ends: its socket in the kubelet's
// device-plugins directory, then Register with the kubelet. When the
// kubelet restarts (it recreates its registration socket and removes the
// plugins' sockets), Run serves a new socket and registers again, as every
// device plugin must. It removes its socket when it returns.
func (p *Plugin) Run(ctx context.Context) error {
	for {
		srv, err := p.serve()
		if err != nil {
			p.log.WithError(err).WithField("socket", p.spec.PluginSocket()).Error("device plugin: cannot serve its socket")
			if !sleep(ctx, p.RetryInterval) {
				return nil
			}
			continue
		}
		kubelet, _ := identity(p.spec.RegistrationSocket())
		if err := p.register(ctx); err != nil {
			p.log.WithError(err).WithField("kubeletSocket", p.spec.RegistrationSocket()).
				Warn("device plugin: registration with the kubelet failed; trying again")
			p.shutdown(srv)
			if !p.waitKubelet(ctx, kubelet, p.RetryInterval) {
				return nil
			}
			continue
		}
		p.log.WithFields(logrus.Fields{"socket": p.spec.PluginSocket(), "devices": len(p.spec.DeviceIDs()),
			"unit": policies.FormatSize(p.spec.Unit), "gpus": len(p.spec.GPUs)}).Info("device plugin registered with the kubelet")
		restart := p.watch(ctx, kubelet)
		p.shutdown(srv)
		if !restart {
			return nil
		}
		p.log.Info("device plugin: the kubelet restarted; registering again")
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// fileID is a file's identity: a recreated socket is a new inode, or the
// same inode number again with a new change time.
type fileID struct {
	dev, ino      uint64
	ctime, ctimeN int64
}

func identity(path string) (fileID, bool) {
	st, err := os.Stat(path)
	if err != nil {
		return fileID{}, false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{uint64(sys.Dev), uint64(sys.Ino), sys.Ctim.Sec, sys.Ctim.Nsec}, true
}

// waitKubelet waits up to d, or less when the kubelet's socket changes;
// false when ctx ended.
func (p *Plugin) waitKubelet(ctx context.Context, was fileID, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !sleep(ctx, min(p.WatchInterval, time.Until(deadline))) {
			return false
		}
		if now, ok := identity(p.spec.RegistrationSocket()); ok && now != was {
			return true
		}
	}
	return true
}

// watch returns true when the kubelet restarted (its socket is another
// file, or ours is gone), false when ctx ended.
func (p *Plugin) watch(ctx context.Context, kubelet fileID) bool {
	own, _ := identity(p.spec.PluginSocket())
	gone := false
	for {
		if !sleep(ctx, p.WatchInterval) {
			return false
		}
		now, ok := identity(p.spec.RegistrationSocket())
		if !ok {
			gone = true // the kubelet is down: register with the one that comes next
			continue
		}
		if now != kubelet || gone {
			return true
		}
		if now, ok := identity(p.spec.PluginSocket()); !ok || now != own {
			return true
		}
	}
}

// serve listens on the plugin socket (replacing a stale one) and serves
// the DevicePlugin service on it.
func (p *Plugin) serve() (*grpc.Server, error) {
	path := p.spec.PluginSocket()
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, err
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, &service{p: p})
	p.mu.Lock()
	p.stop = make(chan struct{})
	p.mu.Unlock()
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			p.log.WithError(err).Warn("device plugin: server stopped")
		}
	}()
	return srv, nil
}

// shutdown ends the streams, stops the server and removes its socket
// (unless the kubelet already did and another file took the name).
func (p *Plugin) shutdown(srv *grpc.Server) {
	p.mu.Lock()
	if p.stop != nil {
		close(p.stop)
		p.stop = nil
	}
	p.mu.Unlock()
	srv.Stop()
	if st, err := os.Lstat(p.spec.PluginSocket()); err == nil && st.Mode()&fs.ModeSocket != 0 {
		_ = os.Remove(p.spec.PluginSocket())
	}
}

func (p *Plugin) stopped() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stop == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return p.stop
}

func (p *Plugin) register(ctx context.Context) error {
	conn, err := grpc.NewClient("unix://"+p.spec.RegistrationSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     pools.SocketName,
		ResourceName: p.spec.Resource,
		Options:      options(),
	}, grpc.WaitForReady(true))
	return err
}

func options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}
}

// service is the DevicePlugin gRPC service.
type service struct {
	pluginapi.UnimplementedDevicePluginServer
	p *Plugin
}

func (s *service) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return options(), nil
}

// ListAndWatch sends the node's devices, every one healthy, and keeps the
// stream open until the kubelet or the plugin ends it.
func (s *service) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	ids := s.p.spec.DeviceIDs()
	devs := make([]*pluginapi.Device, 0, len(ids))
	for _, d := range ids {
		devs = append(devs, &pluginapi.Device{ID: d.String(), Health: pluginapi.Healthy})
	}
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
		return err
	}
	select {
	case <-stream.Context().Done():
	case <-s.p.stopped():
	}
	return nil
}

// GetPreferredAllocation packs each container's units on as few GPUs as
// possible (pools.Preferred).
func (s *service) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range req.GetContainerRequests() {
		ids := pools.Preferred(c.GetAvailableDeviceIDs(), c.GetMustIncludeDeviceIDs(), int(c.GetAllocationSize()))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// Allocate binds each container to the GPUs of its devices: their CDI
// device names, which the runtime resolves in the node's CDI spec (the
// device nodes and driver files of those GPUs only), and the env that goes
// with them (pools.Spec.AllocateEnv); with CDI off, the visible devices env
// alone. The quota comes later, at admission, from the kubelet's
// pod-resources record of the same devices.
func (s *service) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.GetContainerRequests() {
		shares, err := s.p.spec.Shares(c.GetDevicesIds())
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		if len(shares) == 0 {
			return nil, status.Error(codes.InvalidArgument, "no devices to allocate")
		}
		names, err := s.p.spec.CDIDevices(shares)
		if err != nil {
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
		cr := &pluginapi.ContainerAllocateResponse{Envs: s.p.spec.AllocateEnv(shares)}
		for _, n := range names {
			cr.CdiDevices = append(cr.CdiDevices, &pluginapi.CDIDevice{Name: n})
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
		fields := logrus.Fields{"devices": len(c.GetDevicesIds()), "gpus": sharesText(shares)}
		if len(names) > 0 {
			fields["cdiDevices"] = strings.Join(names, ",")
		}
		s.p.log.WithFields(fields).Info("device plugin: allocated")
	}
	return resp, nil
}

func (s *service) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func sharesText(shares []pools.Share) string {
	parts := make([]string, 0, len(shares))
	for _, sh := range shares {
		parts = append(parts, fmt.Sprintf("gpu%d:%s", sh.GPU, policies.FormatSize(sh.Bytes)))
	}
	return strings.Join(parts, ",")
}
