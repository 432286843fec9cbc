package testutil

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// BpftimeKernel is the kernel the bpftime-style test programs
// (gpubpf/compile/testdata/bpftime) name in their sections.
const BpftimeKernel = "_Z4gridPj"

// BpftimeDir is a new probe directory holding the named bpftime-style
// test programs of gpubpf/compile/testdata/bpftime: each NAME.json
// and NAME.bpf.o, built from NAME.bpf.c with "-" as "_" against the
// headers gpuext ships for bpftime's sources (gpubpf/programs/bpftime,
// what the SDK installs as include/bpftime). A kernel other than
// BpftimeKernel replaces it in the sections (a copy of the source is built).
func BpftimeDir(t testing.TB, kernel string, names ...string) string {
	t.Helper()
	root, dir, tmp := RepoRoot(), t.TempDir(), t.TempDir()
	td := filepath.Join(root, "gpubpf", "compile", "testdata", "bpftime")
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
		BuildBpftime(t, src, filepath.Join(dir, name+".bpf.o"))
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
	compileBPF(t, src, out, "gpubpf/programs/bpftime", "gpubpf/programs", "kmod/include")
}
