package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/policies"
)

// settingsCmd writes a tenant dir by hand, as admission would for a policy
// (settings.bin, which the device runtime reads, and config.json), for
// running the device runtime outside a container (test/gpu); or shows the
// settings.bin of one.
func settingsCmd(args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("settings: want write or show")
	}
	switch args[0] {
	case "write":
		return settingsWrite(args[1:], out)
	case "show":
		if len(args) != 2 {
			return errors.New("settings show: want one tenant dir or settings file")
		}
		return settingsShow(args[1], out)
	}
	return fmt.Errorf("settings: unknown subcommand %q", args[0])
}

func settingsWrite(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("settings write", flag.ContinueOnError)
	dir := fs.String("dir", "", "the tenant dir to write (created)")
	tenant := fs.Uint("tenant", 0, "tenant id (> 0)")
	policy := fs.String("policy", "manual", "policy name (config.json only)")
	class := fs.String("class", string(policies.Standard), "priority class")
	quota := fs.String("quota", "0", "device-memory quota (bytes or e.g. 8GiB; 0: none)")
	timeslice := fs.Uint("timeslice-us", 0, "driver timeslice (config.json only; never the latency-critical window)")
	window := fs.Uint("active-window-us", 0, "latency-critical pending window (0: the default, 2ms)")
	sm := fs.Uint("sm-percent", 0, "best-effort share of the SMs under MPS, on each GPU (0: not confined)")
	mpsPrio := fs.Uint("mps-client-priority", 0, "best-effort MPS client priority (CUDA_MPS_CLIENT_PRIORITY): 0 normal, 1 below normal")
	gate := fs.Bool("launch-gate", false, "best-effort: launches wait while latency-critical work is pending (hosts without MPS; off by default)")
	target := fs.String("latency-target", "", "latency-critical: the p99 target the latency controller holds, \"1.5x\" (of the tenant's own p99 alone) or a duration (\"800us\"); empty: none")
	probes := fs.String("probes", "", "comma-separated probe names (config.json only)")
	gpus := fs.String("gpus", "", "host GPU indices the tenant was given, comma-separated in index order (\"0,1\"), as admission writes for a container given gpuext.io/gpu-memory; needs --gpu-quotas")
	gpuQuotas := fs.String("gpu-quotas", "", "the quota on each of --gpus, in the same order (\"2GiB,3GiB\"): device ordinal i (after CUDA_VISIBLE_DEVICES) has the i-th, an ordinal past the list has no memory")
	if err := parseFlags(fs, args, out); err != nil {
		return err
	}
	if *dir == "" || *tenant == 0 || fs.NArg() != 0 {
		return errors.New("settings write: want --dir DIR --tenant N and flags only")
	}
	if !slices.Contains(policies.Classes, policies.PriorityClass(*class)) {
		return fmt.Errorf("settings write: class %q: want one of %v", *class, policies.Classes)
	}
	q, err := policies.ParseSize(*quota)
	if err != nil {
		return fmt.Errorf("settings write: quota %q: %w", *quota, err)
	}
	names := []string{}
	if *probes != "" {
		names = strings.Split(*probes, ",")
	}
	if *mpsPrio > policies.MaxMPSClientPriority {
		return fmt.Errorf("settings write: mps-client-priority %d: want 0..%d", *mpsPrio, policies.MaxMPSClientPriority)
	}
	if *gate && policies.PriorityClass(*class) != policies.BestEffort {
		return fmt.Errorf("settings write: launch-gate: only a best-effort tenant waits (class %q)", *class)
	}
	gpuList, quotaList, err := parseGPUQuotas(*gpus, *gpuQuotas)
	if err != nil {
		return err
	}
	if *target != "" {
		if policies.PriorityClass(*class) != policies.LatencyCritical {
			return fmt.Errorf("settings write: latency-target %q: only a latency-critical tenant has one (class %q)", *target, *class)
		}
		if _, _, err := policies.ParseLatencyTarget(*target); err != nil {
			return fmt.Errorf("settings write: latency-target %w", err)
		}
	}
	prio := policies.PriorityPolicy{Class: policies.PriorityClass(*class), SMPercent: uint32(*sm), MPSClientPriority: uint32(*mpsPrio), LaunchGate: *gate}
	tf := tenantcfg.File{
		ABIVersion: bpf.ABIVersion, TenantID: uint32(*tenant), TenantKey: fmt.Sprintf("manual/%d", *tenant), Policy: *policy,
		Class: *class, QuotaBytes: q, TimesliceUS: uint32(*timeslice), ActiveWindowUS: uint32(*window),
		SMPercent: prio.EffectiveSMPercent(), MPSClientPriority: prio.EffectiveMPSClientPriority(), LaunchGate: prio.EffectiveLaunchGate(), Probes: names, ProbeKernels: []string{},
		GPUs: gpuList, GPUQuotaBytes: quotaList, LatencyTarget: *target,
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	return tenantcfg.WriteFiles(*dir, tf)
}

// parseGPUQuotas reads --gpus and --gpu-quotas: both empty (the quota
// applies on every GPU), or as many host GPU indices, distinct and
// ascending (the order of the container's device ordinals), as quotas.
func parseGPUQuotas(gpus, quotas string) ([]int, []uint64, error) {
	if gpus == "" && quotas == "" {
		return nil, nil, nil
	}
	gs, qs := strings.Split(gpus, ","), strings.Split(quotas, ",")
	if gpus == "" || quotas == "" || len(gs) != len(qs) {
		return nil, nil, fmt.Errorf("settings write: --gpus %q and --gpu-quotas %q: want one quota for each GPU", gpus, quotas)
	}
	if len(gs) > tenantcfg.MaxDevices {
		return nil, nil, fmt.Errorf("settings write: --gpus %q: %d GPUs, at most %d", gpus, len(gs), tenantcfg.MaxDevices)
	}
	var gl []int
	var ql []uint64
	for i := range gs {
		g, err := strconv.Atoi(gs[i])
		if err != nil || g < 0 || (i > 0 && g <= gl[i-1]) {
			return nil, nil, fmt.Errorf("settings write: --gpus %q: GPU %q: want host GPU indices, distinct and ascending", gpus, gs[i])
		}
		q, err := policies.ParseSize(qs[i])
		if err != nil {
			return nil, nil, fmt.Errorf("settings write: --gpu-quotas %q: %q: %w", quotas, qs[i], err)
		}
		gl, ql = append(gl, g), append(ql, q)
	}
	return gl, ql, nil
}

// settingsShow prints a settings.bin as the interposer's start-up line does.
func settingsShow(path string, out io.Writer) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, tenantcfg.FileName)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s, err := tenantcfg.Decode(b)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	gate := 0
	if s.LaunchGate {
		gate = 1
	}
	devices := ""
	if len(s.DeviceQuotas) > 0 { // per device ordinal (tenants given GPU memory)
		qs := make([]string, len(s.DeviceQuotas))
		for i, q := range s.DeviceQuotas {
			qs[i] = strconv.FormatUint(q, 10)
		}
		devices = " device_quotas=" + strings.Join(qs, ",")
	}
	_, err = fmt.Fprintf(out, "tenant=%d quota=%d class=%d window_ns=%d sm_percent=%d mps_client_priority=%d launch_gate=%d%s\n",
		s.TenantID, s.QuotaBytes, s.Class, s.ActiveWindow.Nanoseconds(), s.SMPercent, s.MPSClientPriority, gate, devices)
	return err
}
