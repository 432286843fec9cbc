package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// What `settings write` puts in a tenant dir is what the device runtime
// would read: `settings show` prints it back.
func TestSettingsWriteShow(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tenant")
	if err := run([]string{"settings", "write", "--dir", dir, "--tenant", "7", "--class", "latency-critical", "--quota", "2GiB", "--timeslice-us", "3000"}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run([]string{"settings", "show", dir}, &out); err != nil {
		t.Fatal(err)
	}
	// the driver timeslice is not the latency-critical window: the default is
	want := "tenant=7 quota=2147483648 class=0 window_ns=2000000 sm_percent=0 mps_client_priority=0 launch_gate=0\n"
	if out.String() != want {
		t.Errorf("settings show: %q, want %q", out.String(), want)
	}
	// an unknown class is refused by name, and the tenant's settings stay as they were
	if err := run([]string{"settings", "write", "--dir", dir, "--tenant", "7", "--class", "urgent"}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), `class "urgent"`) {
		t.Errorf("settings write --class urgent: %v, want a refusal naming class \"urgent\"", err)
	}
	out.Reset()
	if err := run([]string{"settings", "show", dir}, &out); err != nil || out.String() != want {
		t.Errorf("settings show after a refused write: %q (%v), want %q unchanged", out.String(), err, want)
	}
}

// A best-effort tenant's MPS share and client priority reach settings.bin;
// a priority CUDA does not know is refused by name and changes nothing.
func TestSettingsWriteMPSClientPriority(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tenant")
	if err := run([]string{"settings", "write", "--dir", dir, "--tenant", "8", "--class", "best-effort", "--sm-percent", "30", "--mps-client-priority", "1"}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	want := "tenant=8 quota=0 class=2 window_ns=2000000 sm_percent=30 mps_client_priority=1 launch_gate=0\n"
	var out bytes.Buffer
	if err := run([]string{"settings", "show", dir}, &out); err != nil || out.String() != want {
		t.Fatalf("settings show: %q (%v), want %q", out.String(), err, want)
	}
	err := run([]string{"settings", "write", "--dir", dir, "--tenant", "8", "--class", "best-effort", "--mps-client-priority", "2"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "mps-client-priority 2") {
		t.Errorf("--mps-client-priority 2: %v, want a refusal naming it", err)
	}
	out.Reset()
	if err := run([]string{"settings", "show", dir}, &out); err != nil || out.String() != want {
		t.Errorf("after the refused write: %q (%v), want %q unchanged", out.String(), err, want)
	}
}

// The launch gate is off unless asked for, reaches settings.bin for a
// best-effort tenant, and is refused by name for any other class.
func TestSettingsWriteLaunchGate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tenant")
	show := func() string {
		t.Helper()
		var out bytes.Buffer
		if err := run([]string{"settings", "show", dir}, &out); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	if err := run([]string{"settings", "write", "--dir", dir, "--tenant", "9", "--class", "best-effort"}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if got := show(); !strings.HasSuffix(got, " launch_gate=0\n") {
		t.Errorf("best-effort without --launch-gate: %q, want launch_gate=0", got)
	}
	if err := run([]string{"settings", "write", "--dir", dir, "--tenant", "9", "--class", "best-effort", "--launch-gate"}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	want := "tenant=9 quota=0 class=2 window_ns=2000000 sm_percent=0 mps_client_priority=0 launch_gate=1\n"
	if got := show(); got != want {
		t.Errorf("--launch-gate: %q, want %q", got, want)
	}
	err := run([]string{"settings", "write", "--dir", dir, "--tenant", "9", "--class", "standard", "--launch-gate"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "launch-gate") || !strings.Contains(err.Error(), `"standard"`) {
		t.Errorf("--launch-gate for a standard tenant: %v, want a refusal naming launch-gate and the class", err)
	}
	if got := show(); got != want {
		t.Errorf("after the refused write: %q, want %q unchanged", got, want)
	}
}

// A tenant given GPU memory on some GPUs (test/gpu's multi-gpu section
// writes one by hand): a quota per device ordinal in settings.bin, the host
// GPUs in config.json; a list that does not pair GPUs with quotas, or GPUs
// out of order, is refused by name and changes nothing.
func TestSettingsWriteGPUQuotas(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tenant")
	if err := run([]string{"settings", "write", "--dir", dir, "--tenant", "9", "--gpus", "0,1", "--gpu-quotas", "1GiB,3GiB"}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	want := "tenant=9 quota=0 class=1 window_ns=2000000 sm_percent=0 mps_client_priority=0 launch_gate=0 device_quotas=1073741824,3221225472\n"
	var out bytes.Buffer
	if err := run([]string{"settings", "show", dir}, &out); err != nil || out.String() != want {
		t.Fatalf("settings show: %q (%v), want %q", out.String(), err, want)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		GPUs []int `json:"gpus"`
	}
	if err := json.Unmarshal(cfg, &tf); err != nil || !slices.Equal(tf.GPUs, []int{0, 1}) {
		t.Errorf("config.json gpus = %v (%v), want [0 1]", tf.GPUs, err)
	}
	for _, bad := range []struct{ gpus, quotas, want string }{
		{"1", "", "--gpus \"1\" and --gpu-quotas \"\""},
		{"0,1", "2GiB", "want one quota for each GPU"},
		{"1,0", "1GiB,1GiB", "GPU \"0\": want host GPU indices, distinct and ascending"},
		{"0,x", "1GiB,1GiB", "GPU \"x\""},
		{"0", "lots", "--gpu-quotas \"lots\""},
	} {
		err := run([]string{"settings", "write", "--dir", dir, "--tenant", "9", "--gpus", bad.gpus, "--gpu-quotas", bad.quotas}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("--gpus %q --gpu-quotas %q: %v, want an error with %q", bad.gpus, bad.quotas, err, bad.want)
		}
	}
	out.Reset()
	if err := run([]string{"settings", "show", dir}, &out); err != nil || out.String() != want {
		t.Errorf("after the refused writes: %q (%v), want %q unchanged", out.String(), err, want)
	}
}
