// Package bpftest gives privileged tests a private tenant registry: pinned
// maps in a fresh directory under /sys/fs/bpf, closed and removed when the
// test ends. It skips locally without root and fails when CI=true.
package bpftest

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/lib/testutil"
)

var seq atomic.Uint64

// PinDir returns a fresh pin directory path (not created) removed at cleanup.
func PinDir(t testing.TB) string {
	t.Helper()
	testutil.RequireRoot(t)
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("gpuext-test-%d-%d", os.Getpid(), seq.Add(1)))
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Registry opens a registry in a fresh pin directory.
func Registry(t testing.TB) (*bpf.Registry, string) {
	t.Helper()
	dir := PinDir(t)
	reg, err := bpf.OpenRegistry(dir)
	if err != nil {
		t.Fatalf("open registry: %v", err)
	}
	t.Cleanup(func() { reg.Close() })
	return reg, dir
}
