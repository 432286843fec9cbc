package maps

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuext/gpuext/devrt/probefiles/launches"
)

// The tenant's .launches files through ReadTenant: a good one is summed,
// a link, a FIFO and garbage are named in Skipped and never read (a link
// to a host file shows nothing of it), and none of them stops the read.
func TestReadTenantLaunchesFiles(t *testing.T) {
	dir := t.TempDir()
	good := &launches.File{PID: 10, Final: true, Kernels: 1,
		Coverage: []launches.Coverage{{Measured: launches.Host, Reason: "sass-only", Kernels: 1, Launches: 7, Blocks: 14}},
		Rows:     []launches.Row{{KernelID: 5, Name: "k", NameLen: 1, Measured: launches.Host, Reason: "sass-only", Kernels: 1, Launches: 7, Blocks: 14}}}
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("10.launches", launches.Encode(good))
	write("11.launches", []byte("GXPLNCH\x00garbage"))
	secret := filepath.Join(t.TempDir(), "secret")
	other := *good
	other.PID = 12
	if err := os.WriteFile(secret, launches.Encode(&other), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dir, "12.launches")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "13.launches"), 0o644); err != nil {
		t.Fatal(err)
	}
	ten, err := ReadTenant(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ten.Launches == nil || ten.Launches.Files != 1 || ten.Launches.Launches[launches.Host] != 7 || ten.Processes != 1 {
		t.Fatalf("launches %+v, processes %d", ten.Launches, ten.Processes)
	}
	skipped := strings.Join(ten.Skipped, "\n")
	for _, want := range []string{"11.launches: not a launches file", "12.launches: refused: a symbolic link", "13.launches: refused: not a regular file"} {
		if !strings.Contains(skipped, want) {
			t.Errorf("skipped %q, want %q", ten.Skipped, want)
		}
	}
	if len(ten.Skipped) != 3 {
		t.Errorf("skipped %d files, want 3: %s", len(ten.Skipped), fmt.Sprint(ten.Skipped))
	}
}
