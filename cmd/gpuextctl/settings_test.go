package main

import (
	"bytes"
	"path/filepath"
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
	want := "tenant=7 quota=2147483648 class=1 window_ns=3000000 sm_percent=0\n"
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
