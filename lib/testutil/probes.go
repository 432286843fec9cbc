package testutil

// Device probes for tests: the example probes of examples/probes (or any
// probe source) compiled with clang as the SDK's probe.mk does, into a
// probe directory (the config's probeDir).

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

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
		SkipOrFail(t, "clang not found (test/lab/install-deps.sh installs it): %v", err)
	}
	root := RepoRoot()
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
	root, dir := RepoRoot(), t.TempDir()
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
