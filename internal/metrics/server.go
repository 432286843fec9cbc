package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Path is where the metrics are served.
const Path = "/metrics"

// NewRegistry is the agent's registry: the Go runtime and process
// collectors (process_cpu_seconds_total is the agent's CPU), the agent's
// own metrics (returned, to be the admission core's Observer), the tenant
// collector over reg and stateDir, the kernel core's counters, and the
// cgroup dmem controller's (DmemCollector, below nvml's HostRoot). With
// nvml, the tenant collector also shows NVML's per-process memory
// (gpuext-gpuview) per tenant and GPU.
func NewRegistry(reg Registry, stateDir string, core KernelCore, nvml ...NVMLOptions) (*prometheus.Registry, *Agent) {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	agent := NewAgent(r)
	kernel := NewKernelCollector(core)
	tenants := NewTenantCollector(reg, stateDir, kernel)
	for _, o := range nvml {
		tenants.SetNVML(o)
	}
	r.MustRegister(kernel, tenants)
	hostRoot := "/" // NVMLOptions.HostRoot is the config's hostRoot
	for _, o := range nvml {
		hostRoot = o.HostRoot
	}
	r.MustRegister(NewDmemCollector(reg, hostRoot))
	agent.tenants = tenants
	return r, agent
}

// Server serves one registry at Path over plain HTTP.
type Server struct {
	ln  net.Listener
	srv *http.Server
}

// Listen binds addr (config.Config.MetricsListen: a port alone is already
// 127.0.0.1:PORT there) and returns a server for r. At most two scrapes
// run at once; a scrape that takes more than ten seconds is answered 503.
func Listen(addr string, r *prometheus.Registry) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, promhttp.HandlerFor(r, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError, // a bad series is left out, the rest is served
		MaxRequestsInFlight: 2,
		Timeout:             10 * time.Second,
	}))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "gpuext agent: metrics at %s\n", Path)
	})
	return &Server{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, MaxHeaderBytes: 16 << 10}}, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve serves until Close.
func (s *Server) Serve() error {
	if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Close stops the server; scrapes in flight get five seconds to finish.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}
