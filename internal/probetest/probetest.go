package probetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gpuext/gpuext/internal/privtest"
)

// RepoRoot is the module's root (where go.mod is), above the working directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Build compiles a probe source into out with clang as probe.mk does
// (BTF and line info, warnings as errors), against the tree's headers.
// Without clang it skips, and fails under CI=true.
func Build(t testing.TB, src, out string) {
	t.Helper()
	compileBPF(t, src, out, "gpubpf/programs", "kmod/include")
}

// compileBPF is Build with the given include directories of the tree, in
// order.
func compileBPF(t testing.TB, src, out string, include ...string) {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		privtest.SkipOrFail(t, "clang not found (test/lab/install-deps.sh installs it): %v", err)
	}
	root := RepoRoot(t)
	args := []string{"--target=bpf", "-g", "-O2", "-Wall", "-Werror"}
	for _, d := range include {
		args = append(args, "-I", filepath.Join(root, d))
	}
	b, err := exec.Command(clang, append(args, "-c", src, "-o", out)...).CombinedOutput()
	if err != nil {
		t.Fatalf("clang %s: %v\n%s", src, err, b)
	}
}

// ExampleDir is a new probe directory holding the named example probes of
// examples/probes: each NAME.json and NAME.bpf.o built from NAME.bpf.c.
func ExampleDir(t testing.TB, examples ...string) string {
	t.Helper()
	root, dir := RepoRoot(t), t.TempDir()
	for _, ex := range examples {
		src := filepath.Join(root, "examples", "probes", ex)
		Build(t, filepath.Join(src, ex+".bpf.c"), filepath.Join(dir, ex+".bpf.o"))
		desc, err := os.ReadFile(filepath.Join(src, ex+".json"))
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, ex+".json"), desc, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
