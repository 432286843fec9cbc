package bpfc

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/lib/testutil"
)

// Flags are the clang flags every probe is built with (before -I and the
// file names).
var Flags = []string{"-target", "bpf", "-O2", "-g", "-Wall", "-Wno-unused-function"}

// Compile builds cfile with clang into an object under t.TempDir() and
// returns its path. includeDirs are passed as -I; the multiarch system
// include directory (for <asm/types.h>, which <linux/types.h> needs) is
// added when it exists. A compiler error fails the test with clang's
// output.
func Compile(t testing.TB, cfile string, includeDirs ...string) string {
	t.Helper()
	return CompileFlags(t, cfile, nil, includeDirs...)
}

// CompileFlags is Compile with extra clang flags after Flags (e.g.
// -mcpu=v3 for 32-bit ALU and jump instructions).
func CompileFlags(t testing.TB, cfile string, extra []string, includeDirs ...string) string {
	t.Helper()
	clang := requireClang(t)
	out := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(cfile), ".c")+".o")
	args := append(append([]string{}, Flags...), extra...)
	for _, d := range includeDirs {
		args = append(args, "-I", d)
	}
	if d := multiarchInclude(); d != "" {
		args = append(args, "-I", d)
	}
	args = append(args, "-c", cfile, "-o", out)
	cmd := exec.Command(clang, args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("clang %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return out
}

// ABIIncludeDir returns the directory holding gpuext_abi.h
// (kmod/include of the module this test runs in), found by walking up from
// the working directory to go.mod.
func ABIIncludeDir(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("getwd: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			inc := filepath.Join(dir, "kmod", "include")
			if _, err := os.Stat(filepath.Join(inc, "gpuext_abi.h")); err != nil {
				t.Fatalf("gpuext_abi.h: %v", err)
			}
			return inc
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod above the working directory")
		}
		dir = parent
	}
}

func requireClang(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("clang")
	if err == nil {
		return p
	}
	testutil.SkipOrFail(t, "clang not found (test/lab/install-deps.sh installs it): %v", err)
	return ""
}

// multiarchInclude is the Debian/Ubuntu multiarch include directory of the
// host, or "" when there is none.
func multiarchInclude() string {
	triplets := map[string]string{
		"amd64":   "x86_64-linux-gnu",
		"arm64":   "aarch64-linux-gnu",
		"ppc64le": "powerpc64le-linux-gnu",
		"s390x":   "s390x-linux-gnu",
		"riscv64": "riscv64-linux-gnu",
	}
	tr, ok := triplets[runtime.GOARCH]
	if !ok {
		return ""
	}
	d := filepath.Join(string(filepath.Separator), "usr", "include", tr)
	if st, err := os.Stat(d); err == nil && st.IsDir() {
		return d
	}
	return ""
}
