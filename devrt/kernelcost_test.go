package devrt

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/lib/testutil"
)

// test/gpu/kernel_cost.c, the probed-kernel timer that make gpu-test's
// probe-app runs on the H200, against the fake libcuda: it builds with gcc,
// names a bad argument or a missing kernel, and runs its whole path
// (module load, graph capture, events, the report, the launch-time writes'
// stream rows) on the fake's one kernel, so the H200 call is not the first time it runs.
func TestKernelCostHarness(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		testutil.SkipOrFail(t, "gcc is needed to build test/gpu/kernel_cost.c")
	}
	bin := testutil.BuildDevrt(t)
	dir := t.TempDir()
	kc := filepath.Join(dir, "kernel_cost")
	if out, err := exec.Command(gcc, "-O2", "-Wall", "-Wextra", "-Werror", "-std=gnu11", "-I", "lib", "-o", kc,
		filepath.Join("..", "test", "gpu", "kernel_cost.c"), "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("gcc kernel_cost.c: %v\n%s", err, out)
	}
	ptx := func(name, entry string) string {
		p := filepath.Join(dir, name)
		text := ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry " + entry + "(.param .u64 p)\n{\n\tret;\n}\n"
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// the fake driver knows one kernel, the interposer's clock kernel; with
	// FAKECUDA_CLOCK_NO_START its launches do nothing
	const clock = "__gpuext_clock_sync"
	plain, spliced, other := ptx("plain.ptx", clock), ptx("spliced.ptx", clock), ptx("other.ptx", "k")
	for _, c := range []struct {
		name     string
		args     []string
		wantExit int
		want     []string
	}{
		{"runs", []string{"3", "10", clock, "4x2", "32", "b1024,i32:5,i64:7,f32:1e-5", plain, spliced}, 0,
			[]string{"INFO kernel_cost file=plain.ptx kernel=" + clock, "ratio=1.0000 added_us=0.000", "INFO kernel_cost file=spliced.ptx",
				// the launch-time writes' rows, each variant
				"INFO kernel_cost stream=launch writes=0 kernel=" + clock, "stream=write writes=1", "stream=write writes=2"}},
		{"bad argument", []string{"3", "10", clock, "4", "32", "b1024,x:3", plain}, 1, []string{`argument 2 "x:3": want bN, i32:V, i64:V or f32:V`}},
		{"empty buffer", []string{"3", "10", clock, "4", "32", "b0", plain}, 1, []string{`argument 1 "b0": want bN, N bytes > 0`}},
		{"missing kernel", []string{"3", "10", clock, "4", "32", "b8", other}, 1, []string{"FAIL kernel_cost: " + clock + ":"}},
		{"bad grid", []string{"3", "10", clock, "4x0", "32", "b8", plain}, 2, []string{"usage:"}},
	} {
		cmd := exec.Command(kc, c.args...)
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+filepath.Join(bin, "fake"), "FAKECUDA_CLOCK_NO_START=1")
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if code != c.wantExit {
			t.Errorf("%s: exit %d, want %d:\n%s", c.name, code, c.wantExit, out)
		}
		for _, w := range c.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s: output lacks %q:\n%s", c.name, w, out)
			}
		}
	}
}
