package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/internal/admission"
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
		return settingsWrite(args[1:])
	case "show":
		if len(args) != 2 {
			return errors.New("settings show: want one tenant dir or settings file")
		}
		return settingsShow(args[1], out)
	}
	return fmt.Errorf("settings: unknown subcommand %q", args[0])
}

func settingsWrite(args []string) error {
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
	probes := fs.String("probes", "", "comma-separated probe names (config.json only)")
	if err := fs.Parse(args); err != nil {
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
	prio := policies.PriorityPolicy{Class: policies.PriorityClass(*class), SMPercent: uint32(*sm), MPSClientPriority: uint32(*mpsPrio), LaunchGate: *gate}
	tf := admission.TenantFile{
		ABIVersion: bpf.ABIVersion, TenantID: uint32(*tenant), TenantKey: fmt.Sprintf("manual/%d", *tenant), Policy: *policy,
		Class: *class, QuotaBytes: q, TimesliceUS: uint32(*timeslice), ActiveWindowUS: uint32(*window),
		SMPercent: prio.EffectiveSMPercent(), MPSClientPriority: prio.EffectiveMPSClientPriority(), LaunchGate: prio.EffectiveLaunchGate(), Probes: names, ProbeKernels: []string{},
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	return admission.WriteTenantFiles(*dir, tf)
}

// settingsShow prints a settings.bin as the interposer's start-up line does.
func settingsShow(path string, out io.Writer) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, admission.TenantSettingsFile)
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
	_, err = fmt.Fprintf(out, "tenant=%d quota=%d class=%d window_ns=%d sm_percent=%d mps_client_priority=%d launch_gate=%d\n",
		s.TenantID, s.QuotaBytes, s.Class, s.ActiveWindow.Nanoseconds(), s.SMPercent, s.MPSClientPriority, gate)
	return err
}
