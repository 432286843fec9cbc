package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var devrtBuild struct {
	once sync.Once
	dir  string
	err  error
}

// BuildDevrt runs devrt/build.sh once per test binary and returns its
// output directory: libgpuext-devrt.so, and under fake/ the fake libcuda
// and libnvidia-ml (FAKECUDA_*, FAKENVML_PROCESSES: devrt/fake) and the
// test apps. Callers share the directory: they may add files of their own
// but must not change what the script built.
func BuildDevrt(t testing.TB) string {
	t.Helper()
	devrtBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "gpuext-devrt-build-")
		if err != nil {
			devrtBuild.err = err
			return
		}
		devrtBuild.dir = dir
		out, err := exec.Command("sh", filepath.Join(RepoRoot(), "devrt", "build.sh"), dir).CombinedOutput()
		if err != nil {
			devrtBuild.err = fmt.Errorf("devrt/build.sh: %w\n%s", err, out)
		}
	})
	if devrtBuild.err != nil {
		t.Fatal(devrtBuild.err)
	}
	return devrtBuild.dir
}
