package probetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/internal/privtest"
)

// BpftimeKernel is the kernel the bpftime-style test programs
// (devrt/probe/compile/testdata/bpftime) name in their sections.
const BpftimeKernel = "_Z4gridPj"

// BpftimeDir is a new probe directory holding the named bpftime-style
// test programs of devrt/probe/compile/testdata/bpftime: each NAME.json
// and NAME.bpf.o, built from NAME.bpf.c with "-" as "_" against the
// headers gpuext ships for bpftime's sources (policies/probes/bpftime,
// what the SDK installs as include/bpftime). A kernel other than
// BpftimeKernel replaces it in the sections (a copy of the source is built).
func BpftimeDir(t testing.TB, kernel string, names ...string) string {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		privtest.SkipOrFail(t, "clang not found (test/lab/install-deps.sh installs it): %v", err)
	}
	root, dir, tmp := RepoRoot(t), t.TempDir(), t.TempDir()
	td := filepath.Join(root, "devrt", "probe", "compile", "testdata", "bpftime")
	for _, name := range names {
		src := filepath.Join(td, strings.ReplaceAll(name, "-", "_")+".bpf.c")
		text, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if kernel != "" && kernel != BpftimeKernel {
			src = filepath.Join(tmp, filepath.Base(src))
			if err := os.WriteFile(src, []byte(strings.ReplaceAll(string(text), BpftimeKernel, kernel)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		buildBpftime(t, clang, root, src, filepath.Join(dir, name+".bpf.o"))
		desc, err := os.ReadFile(filepath.Join(td, name+".json"))
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name+".json"), desc, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// BuildBpftime compiles a bpftime-style source into out against the
// headers gpuext ships for bpftime's sources, as Build does otherwise.
func BuildBpftime(t testing.TB, src, out string) {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		privtest.SkipOrFail(t, "clang not found (test/lab/install-deps.sh installs it): %v", err)
	}
	buildBpftime(t, clang, RepoRoot(t), src, out)
}

func buildBpftime(t testing.TB, clang, root, src, out string) {
	t.Helper()
	b, err := exec.Command(clang, "--target=bpf", "-g", "-O2", "-Wall", "-Werror",
		"-I", filepath.Join(root, "policies", "probes", "bpftime"), "-I", filepath.Join(root, "policies", "probes"),
		"-I", filepath.Join(root, "kmod", "include"), "-c", src, "-o", out).CombinedOutput()
	if err != nil {
		t.Fatalf("clang %s: %v\n%s", src, err, b)
	}
}
