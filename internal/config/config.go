// Package config is the configuration file shared by the gpuext agent, the
// OCI hook and the runc wrapper: its format, defaults and validation.
// Decoding is strict: an unknown field is an error naming it. It imports
// nothing of the admission core, so the thin hooks read the same file the
// agent does; the agent's wiring of a core from it is admission.Open.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf/ids"
	"github.com/gpuext/gpuext/internal/deviceplugin/pools"
	"github.com/gpuext/gpuext/internal/failmode"
	"github.com/gpuext/gpuext/lib/strictjson"
	"github.com/gpuext/gpuext/policies/grammar"
)

// Config is the file format (JSON). Every field has a default.
type Config struct {
	// FailMode is "fail-open" (default: a bad request starts the container with
	// the default policy and logs the keyed error) or "strict" (refuse it).
	// Decoding reads it once (failmode.Parse): every component uses it as
	// decoded ("fail-closed" reads as strict).
	FailMode failmode.Mode `json:"failMode,omitempty"`
	// PinDir is the bpffs directory of the tenant registry.
	PinDir string `json:"pinDir,omitempty"`
	// StateDir holds tenant directories (mounted read-only into containers).
	StateDir string `json:"stateDir,omitempty"`
	// DevrtDir is the host directory of the device runtime library.
	DevrtDir string `json:"devrtDir,omitempty"`
	// CatalogDir holds extra policy files (*.json) that add to or override the built-in catalog.
	CatalogDir string `json:"catalogDir,omitempty"`
	// KernelPolicyDir holds kernel policies that are not built in: NAME.json
	// (a descriptor) and its BPF object, built with the SDK
	// (docs/write-a-policy.md). Catalog policies and overrides name its
	// memory policies like built-in eviction/prefetch algorithms.
	KernelPolicyDir string `json:"kernelPolicyDir,omitempty"`
	// ProbeDir holds device probes that are not built in: NAME.json (a
	// probe catalog entry) and its BPF object, built with the SDK
	// (docs/write-a-probe.md), verified when the directory loads.
	// Containers select them with probes.gpuext.io like built-in probes.
	ProbeDir string `json:"probeDir,omitempty"`
	// ConstraintsFile is the admin constraints file (who may ask for what).
	ConstraintsFile string `json:"constraintsFile,omitempty"`
	// HostRoot prefixes /proc and /sys/fs/cgroup (for running inside a container).
	HostRoot string `json:"hostRoot,omitempty"`
	// LogFile is where logs go (JSON lines). Empty: stderr.
	LogFile string `json:"logFile,omitempty"`
	// LogLevel is a logrus level: debug, info, warn, error.
	LogLevel string `json:"logLevel,omitempty"`
	// DockerDataRoot is dockerd's data-root, where the runc wrapper reads container labels.
	DockerDataRoot string `json:"dockerDataRoot,omitempty"`
	// Runc is the real runc the wrapper executes.
	Runc string `json:"runc,omitempty"`
	// HookPath is the OCI hook binary the runc wrapper adds to config.json.
	HookPath string `json:"hookPath,omitempty"`
	// MPSPipeDirectory is the pipe directory of the host's MPS control daemon
	// (nvidia-cuda-mps-control -d with CUDA_MPS_PIPE_DIRECTORY set). Set, every
	// tenant container becomes an MPS client and best-effort policies with a
	// smPercent are confined to that share of the SMs. Empty: no MPS.
	MPSPipeDirectory string `json:"mpsPipeDirectory,omitempty"`
	// MPSShmDirectory is mounted at /dev/shm in tenant containers (the shared
	// memory of the MPS server, for containers with their own IPC namespace).
	// Every tenant shares it: their POSIX shared memory is visible to each
	// other (docs/injection.md).
	MPSShmDirectory string `json:"mpsShmDirectory,omitempty"`
	// MPSRootTenants: "allow" (default) makes a tenant that may run as the
	// host's root an MPS client too, with a warning (root can change a
	// running server's share through the control socket); "deny" leaves it
	// a plain client. Tenants with a non-root user are MPS clients either way.
	MPSRootTenants string `json:"mpsRootTenants,omitempty"`
	// AgentSocket is the host agent's API socket (root only), which the runc
	// wrapper and the OCI hooks call (internal/agentapi).
	AgentSocket string `json:"agentSocket,omitempty"`
	// ReconcileInterval is how often the agent collects what crashed or
	// killed runtimes left behind (a Go duration, e.g. "30s"; "0" turns it
	// off): registry entries of OCI containers whose cgroup is gone,
	// tenants reserved but never started, orphaned tenant ids.
	ReconcileInterval string `json:"reconcileInterval,omitempty"`
	// ReconcileGrace is how old a reservation without a cgroup must be
	// before reconcile releases it (a Go duration; default "60s").
	ReconcileGrace string `json:"reconcileGrace,omitempty"`
	// MetricsAddress is where the agent serves Prometheus metrics
	// (/metrics, docs/metrics.md): "IP:PORT", "localhost:PORT", or a port
	// alone ("9464" or ":9464"), which binds 127.0.0.1 only. Empty (the
	// default): no metrics server.
	MetricsAddress string `json:"metricsAddress,omitempty"`
	// DevicePlugin, when present, makes the agent advertise the node's GPU
	// memory to the kubelet as an extended resource and take each
	// Kubernetes container's quota from what the kubelet allocated to it
	// (docs/device-plugin.md). Absent (the default): no device plugin.
	DevicePlugin *pools.Config `json:"devicePlugin,omitempty"`
	// MemoryGuard holds tenants' GPU memory quotas without their
	// cooperation: the agent reads each process's device memory from the
	// driver (NVML, through gpuext-gpuview --watch) and stops the process
	// that pushed its tenant over (docs/configuration.md, "What holds the quota"). On by default
	// wherever gpuext-gpuview and the NVIDIA driver are.
	MemoryGuard MemoryGuard `json:"memoryGuard,omitzero"`
	// LatencyControl holds latency-critical tenants' latency targets (their
	// policies' priority.latencyTarget) by choosing the MPS share of
	// best-effort contexts and pacing best-effort launches
	// (docs/priority-control.md). On by default; it acts only while a tenant
	// with a target is on the node.
	LatencyControl LatencyControl `json:"latencyControl,omitzero"`
	// Gpuview is the gpuext-gpuview binary the agent runs for what it reads
	// of NVML (the metrics' per-process series, the memory guard, the
	// device plugin's discovery unless devicePlugin.gpuview names another).
	// Empty: the one beside the agent, else on PATH.
	Gpuview string `json:"gpuview,omitempty"`
}

// GpuviewBinary is the configured gpuext-gpuview ("" for beside the agent
// or on PATH): devicePlugin.gpuview where set, else gpuview.
func (c Config) GpuviewBinary() string {
	if c.DevicePlugin != nil && c.DevicePlugin.Gpuview != "" {
		return c.DevicePlugin.Gpuview
	}
	return c.Gpuview
}

// MemoryGuard is the memoryGuard section; every field is optional.
type MemoryGuard struct {
	// Action on a tenant over its quota plus margins: "kill" (default: the
	// process that pushed it over gets SIGKILL), "report" (log and count
	// only) or "off" (no guard).
	Action string `json:"action,omitempty"`
	// Interval between two NVML samples (a Go duration, default "500ms",
	// at least 50ms): with the driver's own lag, how long an overrun can
	// last before it is seen.
	Interval string `json:"interval,omitempty"`
	// ContextMargin is the device memory each process may hold beyond its
	// allocations, for the driver's context and module images, which NVML
	// counts and the quota does not (a size, default "1GiB"; measured in
	// docs/configuration.md, "What holds the quota").
	ContextMargin string `json:"contextMargin,omitempty"`
}

// MemoryGuardSpec is the memoryGuard section's values (validated when
// decoded): the action ("kill", "report" or "off"), the sampling interval
// and the per-process margin, defaults filled in.
func (c Config) MemoryGuardSpec() (action string, interval time.Duration, margin uint64) {
	action, interval, margin, _ = c.MemoryGuard.spec()
	return action, interval, margin
}

// The memoryGuard defaults.
const (
	DefaultMemoryGuardInterval = 500 * time.Millisecond
	DefaultMemoryGuardMargin   = 1 << 30
	minMemoryGuardInterval     = 50 * time.Millisecond
)

func (g MemoryGuard) spec() (action string, interval time.Duration, margin uint64, err error) {
	action, interval, margin = g.Action, DefaultMemoryGuardInterval, DefaultMemoryGuardMargin
	switch action {
	case "":
		action = "kill"
	case "kill", "report", "off":
	default:
		return "", 0, 0, fmt.Errorf("memoryGuard.action %s: want \"kill\", \"report\" or \"off\"", shown(g.Action))
	}
	if g.Interval != "" {
		if interval, err = time.ParseDuration(g.Interval); err != nil || interval < minMemoryGuardInterval {
			return "", 0, 0, fmt.Errorf("memoryGuard.interval %s: want a Go duration of at least %s", shown(g.Interval), minMemoryGuardInterval)
		}
	}
	if g.ContextMargin != "" {
		if margin, err = grammar.ParseSize(g.ContextMargin); err != nil || margin == 0 {
			return "", 0, 0, fmt.Errorf("memoryGuard.contextMargin %s: want a size above 0 such as \"1GiB\"", shown(g.ContextMargin))
		}
	}
	return action, interval, margin, nil
}

// LatencyControl is the latencyControl section; every field is optional.
type LatencyControl struct {
	// Mode: "on" (default) or "off".
	Mode string `json:"mode,omitempty"`
	// BudgetPercent: the share of the SMs the node's best-effort contexts
	// get together while a latency target is on the node, at start (1..100,
	// default 60); the controller lowers it while a target is missed and
	// raises it while every target holds with room. Each best-effort
	// tenant's contexts get an even part, never above its policy's
	// smPercent.
	BudgetPercent uint32 `json:"budgetPercent,omitempty"`
	// StallAfter: a best-effort tenant whose processes live but complete
	// no GPU work this long is reported stalled (a Go duration, default
	// "30s").
	StallAfter string `json:"stallAfter,omitempty"`
	// PaceDepth: while the controller paces, at most this many of a
	// best-effort process's launches are unfinished when it launches
	// again (1..16); 0 (the default): no bound, launches are held only
	// during latency-critical requests.
	PaceDepth *int `json:"paceDepth,omitempty"`
}

// LatencySpec is the latencyControl section's values, validated.
type LatencySpec struct {
	On         bool
	Budget     uint32        // 0: the controller's default
	StallAfter time.Duration // 0: the controller's default
	PaceDepth  int           // 0: the controller's default (no bound); negative: no bound
}

// LatencyControlSpec is the latencyControl section's values (validated
// when decoded).
func (c Config) LatencyControlSpec() LatencySpec {
	s, _ := c.LatencyControl.spec()
	return s
}

func (l LatencyControl) spec() (s LatencySpec, err error) {
	switch l.Mode {
	case "", "on":
		s.On = true
	case "off":
	default:
		return LatencySpec{}, fmt.Errorf("latencyControl.mode %s: want \"on\" or \"off\"", shown(l.Mode))
	}
	if l.BudgetPercent > 100 {
		return LatencySpec{}, fmt.Errorf("latencyControl.budgetPercent %d: want 1..100 (percent of the SMs)", l.BudgetPercent)
	}
	s.Budget = l.BudgetPercent
	if l.StallAfter != "" {
		if s.StallAfter, err = time.ParseDuration(l.StallAfter); err != nil || s.StallAfter < time.Second {
			return LatencySpec{}, fmt.Errorf("latencyControl.stallAfter %s: want a Go duration of at least 1s", shown(l.StallAfter))
		}
	}
	if l.PaceDepth != nil {
		switch d := *l.PaceDepth; {
		case d < 0 || d > 16:
			return LatencySpec{}, fmt.Errorf("latencyControl.paceDepth %d: want 0 (no bound) or 1..16 unfinished launches", d)
		case d == 0:
			s.PaceDepth = -1
		default:
			s.PaceDepth = d
		}
	}
	return s, nil
}

// DevicePluginSpec is the validated DevicePlugin section; ok is false when
// there is none. Validated when decoded.
func (c Config) DevicePluginSpec() (spec pools.Spec, ok bool) {
	if c.DevicePlugin == nil {
		return pools.Spec{}, false
	}
	spec, err := c.DevicePlugin.Validate()
	return spec, err == nil
}

// MetricsListen is MetricsAddress as the address to listen on (a port
// alone on 127.0.0.1); "" when metrics are off. Validated when decoded.
func (c Config) MetricsListen() string {
	addr, _ := metricsListen(c.MetricsAddress)
	return addr
}

// metricsListen checks a metricsAddress: an IP literal or "localhost" and
// a decimal port 1-65535; never a host name to resolve (what it binds
// must be what the operator read in the file).
func metricsListen(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	host, port := "", v
	if strings.ContainsAny(v, ":[]") {
		var err error
		if host, port, err = net.SplitHostPort(v); err != nil {
			return "", errors.New("want IP:PORT, localhost:PORT or a port alone") // its error repeats v
		}
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || port != strconv.FormatUint(n, 10) {
		return "", fmt.Errorf("port %s: want a decimal number from 1 to 65535", shown(port))
	}
	switch {
	case host == "":
		host = "127.0.0.1" // a port alone: this host only
	case host == "localhost":
	default:
		ip, err := netip.ParseAddr(host)
		if err != nil || ip.Zone() != "" {
			return "", fmt.Errorf("host %s: want an IP address or localhost, not a name to resolve", shown(host))
		}
	}
	return net.JoinHostPort(host, port), nil
}

// Reconcile returns ReconcileInterval and ReconcileGrace as durations
// (validated when the config is decoded).
func (c Config) Reconcile() (interval, grace time.Duration) {
	interval, _ = time.ParseDuration(c.ReconcileInterval)
	grace, _ = time.ParseDuration(c.ReconcileGrace)
	return interval, grace
}

// Defaults used for empty fields.
const (
	DefaultStateDir       = "/run/gpuext"
	DefaultDevrtDir       = "/opt/gpuext/devrt"
	DefaultDockerDataRoot = "/var/lib/docker"
	DefaultRunc           = "runc"
	// DefaultAgentSocket is in a root-only directory of its own.
	DefaultAgentSocket = "/run/gpuext-agent/agent.sock"
)

// The values of MPSRootTenants.
const (
	MPSRootAllow = "allow"
	MPSRootDeny  = "deny"
)

// Default returns the defaults.
func Default() Config {
	return Config{
		FailMode: failmode.Open, PinDir: ids.DefaultPinDir, StateDir: DefaultStateDir,
		DevrtDir: DefaultDevrtDir, HostRoot: "/", LogLevel: "info", DockerDataRoot: DefaultDockerDataRoot,
		Runc: DefaultRunc, ReconcileInterval: "30s", ReconcileGrace: "60s", AgentSocket: DefaultAgentSocket,
	}
}

// Parse decodes a config over the defaults. Unknown fields are errors.
func Parse(data []byte, name string) (Config, error) {
	cfg := Default()
	if len(bytes.TrimSpace(data)) == 0 {
		return cfg, nil
	}
	return cfg, decodeInto(&cfg, data, name)
}

// Overlay decodes data over an existing config (fields absent in data keep their value).
func Overlay(base Config, data []byte, name string) (Config, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return base, nil
	}
	return base, decodeInto(&base, data, name)
}

func decodeInto(cfg *Config, data []byte, name string) error {
	if err := strictjson.Decode(data, cfg); err != nil {
		return fmt.Errorf("config %s: %w", name, err)
	}
	mode, err := failmode.Parse(string(cfg.FailMode))
	if err != nil {
		return fmt.Errorf("config %s: failMode %s: want %q or %q", name, shown(string(cfg.FailMode)), failmode.Open, failmode.Strict)
	}
	cfg.FailMode = mode
	if _, err := logrus.ParseLevel(cfg.LogLevel); err != nil {
		return fmt.Errorf("config %s: logLevel %s: want panic, fatal, error, warn, info, debug or trace", name, shown(cfg.LogLevel))
	}
	for key, v := range map[string]string{"reconcileInterval": cfg.ReconcileInterval, "reconcileGrace": cfg.ReconcileGrace} {
		if d, err := time.ParseDuration(v); err != nil || d < 0 {
			return fmt.Errorf("config %s: %s %s: want a non-negative Go duration such as \"30s\"", name, key, shown(v))
		}
	}
	// Paths every component resolves the same way, wherever it runs: a
	// relative one would resolve against whatever directory the runtime,
	// the hook or the agent runs in (and the socket is mounted into every
	// tenant container). Required ones must be set.
	for _, p := range []struct {
		key, v   string
		required bool
	}{
		{"pinDir", cfg.PinDir, true}, {"stateDir", cfg.StateDir, true}, {"devrtDir", cfg.DevrtDir, true},
		{"agentSocket", cfg.AgentSocket, true}, {"hostRoot", cfg.HostRoot, true},
		{"catalogDir", cfg.CatalogDir, false}, {"kernelPolicyDir", cfg.KernelPolicyDir, false},
		{"probeDir", cfg.ProbeDir, false}, {"constraintsFile", cfg.ConstraintsFile, false},
		{"logFile", cfg.LogFile, false}, {"dockerDataRoot", cfg.DockerDataRoot, false},
		{"hookPath", cfg.HookPath, false}, {"gpuview", cfg.Gpuview, false},
		{"mpsPipeDirectory", cfg.MPSPipeDirectory, false}, {"mpsShmDirectory", cfg.MPSShmDirectory, false},
	} {
		if (p.v != "" || p.required) && !filepath.IsAbs(p.v) {
			return fmt.Errorf("config %s: %s %s: must be an absolute path", name, p.key, shown(p.v))
		}
	}
	switch cfg.MPSRootTenants {
	case "", MPSRootAllow, MPSRootDeny:
	default:
		return fmt.Errorf("config %s: mpsRootTenants %s: want %q or %q", name, shown(cfg.MPSRootTenants), MPSRootAllow, MPSRootDeny)
	}
	if _, err := metricsListen(cfg.MetricsAddress); err != nil {
		return fmt.Errorf("config %s: metricsAddress %s: %w", name, shown(cfg.MetricsAddress), err)
	}
	if cfg.DevicePlugin != nil {
		if _, err := cfg.DevicePlugin.Validate(); err != nil {
			return fmt.Errorf("config %s: %w", name, err)
		}
	}
	if _, _, _, err := cfg.MemoryGuard.spec(); err != nil {
		return fmt.Errorf("config %s: %w", name, err)
	}
	if _, err := cfg.LatencyControl.spec(); err != nil {
		return fmt.Errorf("config %s: %w", name, err)
	}
	return nil
}

// maxShown is how much of a bad value an error quotes: a config value can
// be as long as the file, and an error that repeats it floods the log.
const maxShown = 64

// shown is v quoted, cut to maxShown bytes (with its length said).
func shown(v string) string {
	if len(v) <= maxShown {
		return strconv.Quote(v)
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(strings.ToValidUTF8(v[:maxShown], "")), len(v))
}

// DefaultPath is where the systemd units, the chart and the README put the
// config file.
const DefaultPath = "/etc/gpuext/config.json"

// LoadOrDefault is Load for the agent and the CLI: every field is optional,
// so DefaultPath may be missing, which gives the defaults (usedDefaults
// tells the caller to log it). A missing file at any other path is an
// error: a path named by hand is meant.
func LoadOrDefault(path string) (cfg Config, usedDefaults bool, err error) {
	return loadOrDefault(path, DefaultPath)
}

func loadOrDefault(path, defaultPath string) (Config, bool, error) {
	if path == "" {
		return Default(), true, nil
	}
	cfg, err := Load(path)
	if path == defaultPath && errors.Is(err, fs.ErrNotExist) {
		return Default(), true, nil
	}
	return cfg, false, err
}

// Load reads a config file; an empty path gives the defaults.
func Load(path string) (Config, error) {
	if path == "" {
		return Default(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return Parse(data, path)
}
