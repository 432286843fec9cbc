package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var gpuviewBuild struct {
	once sync.Once
	bin  string
	out  []byte
	err  error
}

// BuildGpuviewOverFake builds gpuext-gpuview (with cgo, as make build
// does) once per test binary and returns it with the directory holding the
// repo's fake libnvidia-ml.so.1 (BuildDevrt), for LD_LIBRARY_PATH:
// FAKECUDA_DEVICES, FAKECUDA_TOTAL_BYTES and FAKENVML_PROCESSES set what it
// reports (devrt/fake/fakenvml.c). This is how the agent's NVML chain (the
// metrics' per-process series, the device plugin's discovery) runs where no
// GPU is.
func BuildGpuviewOverFake(t testing.TB) (bin, fakeLibDir string) {
	t.Helper()
	fakeLibDir = filepath.Join(BuildDevrt(t), "fake")
	gpuviewBuild.once.Do(func() {
		// beside the device runtime's build: one directory per test binary
		gpuviewBuild.bin = filepath.Join(filepath.Dir(fakeLibDir), "gpuext-gpuview")
		build := exec.Command("go", "build", "-o", gpuviewBuild.bin, "./cmd/gpuext-gpuview")
		build.Dir, build.Env = RepoRoot(), append(os.Environ(), "CGO_ENABLED=1")
		gpuviewBuild.out, gpuviewBuild.err = build.CombinedOutput()
	})
	if gpuviewBuild.err != nil {
		t.Fatalf("go build gpuext-gpuview: %v\n%s", gpuviewBuild.err, gpuviewBuild.out)
	}
	return gpuviewBuild.bin, fakeLibDir
}
