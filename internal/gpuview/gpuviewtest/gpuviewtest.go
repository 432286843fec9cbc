// Package gpuviewtest builds what tests need to run the agent's NVML chain
// where no GPU is: gpuext-gpuview (with cgo, as make build does) and the
// repo's fake libnvidia-ml.so.1 (devrt/build.sh). The metrics' per-process
// series and the device plugin's discovery both run through it.
package gpuviewtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// BuildOverFake builds gpuext-gpuview and the fake NVML into a temporary
// directory and returns the binary and the directory holding the fake
// library (for LD_LIBRARY_PATH; FAKECUDA_DEVICES, FAKECUDA_TOTAL_BYTES and
// FAKENVML_PROCESSES set what it reports: devrt/fake/fakenvml.c).
func BuildOverFake(t testing.TB) (bin, fakeLibDir string) {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..", "..")
	work := t.TempDir()
	if out, err := exec.Command("sh", filepath.Join(root, "devrt", "build.sh"), filepath.Join(work, "devrt")).CombinedOutput(); err != nil {
		t.Fatalf("devrt/build.sh: %v\n%s", err, out)
	}
	bin = filepath.Join(work, "gpuext-gpuview")
	build := exec.Command("go", "build", "-o", bin, "./cmd/gpuext-gpuview")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build gpuext-gpuview: %v\n%s", err, out)
	}
	return bin, filepath.Join(work, "devrt", "fake")
}
