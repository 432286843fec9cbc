package compile

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/helpers"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/lib/testutil"
)

// spliceCLI builds the interposer's own module.conf parser and PTX splice
// (devrt/tools/ptxpatch_cli.c with devrt/lib/ptxpatch.c and fatbin.c) with gcc.
func spliceCLI(t *testing.T) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		testutil.SkipOrFail(t, "gcc is needed to check bundles against the interposer's splice")
	}
	devrt := filepath.Join("..", "..", "devrt")
	out := filepath.Join(t.TempDir(), "ptxpatch_cli")
	cmd := exec.Command(gcc, "-O2", "-std=gnu11", "-I", filepath.Join(devrt, "include"), "-I", filepath.Join(devrt, "lib"),
		"-o", out, filepath.Join(devrt, "tools", "ptxpatch_cli.c"), filepath.Join(devrt, "lib", "ptxpatch.c"),
		filepath.Join(devrt, "lib", "fatbin.c"), "-ldl")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, b)
	}
	return out
}

// The bundle as the interposer sees it: module.conf parses, the fragment
// splices into a CUDA image's PTX (the .version raised to min_ptx, entry and
// exit calls in the kernel), and an image below min_target stays unpatched.
func TestBundleSplicesWithTheInterposer(t *testing.T) {
	cli := spliceCLI(t)
	lib := helpers.PTX
	if _, err := helpers.PTX(); errors.Is(err, helpers.ErrNotBuilt) {
		lib = externHelpers // the splice does not care who defines the helpers
	}
	b, err := NewCompiler(programs.Builtin(), lib).Compile([]string{"launch-stats", "sm-histogram", "launch-latency"})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "probes")
	if err := b.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	patch := func(image string) (string, error) {
		var out, stderr bytes.Buffer
		cmd := exec.Command(cli, "-c", filepath.Join(dir, ConfFile), filepath.Join(dir, abi.ModuleFile), image)
		cmd.Stdout, cmd.Stderr = &out, &stderr
		err := cmd.Run()
		if err != nil && stderr.Len() > 0 {
			t.Logf("ptxpatch_cli: %s", stderr.String())
		}
		return out.String(), err
	}
	out, err := patch(filepath.Join("..", "..", "devrt", "testdata", "ptx", "vecadd.ptx"))
	if err != nil {
		t.Fatalf("patch vecadd.ptx: %v\n%s", err, out)
	}
	for _, want := range []string{
		// every catalog probe acts in thread 0 of the block (the guard), and the
		// bundle has the inline form: the programs' blocks instead of the calls
		"@%__gpuext_nt0 bra $__gpuext_skip_entry;", "@%__gpuext_nt0 bra $__gpuext_skip_exit;",
		"$__gpuext_i0_entry_p0_end:", "$__gpuext_i0_exit_p0_end:",
		".visible .func " + abi.FuncEntry,
		"__gpuext_map_ls_counters", "__gpuext_map_smh_counts", "__gpuext_map_lat_hist",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("patched image lacks %q", want)
		}
	}
	if strings.Contains(out, "call __gpuext_probe_") || strings.Contains(out, "call.uni __gpuext_probe_") {
		t.Errorf("inline bundle, yet the kernel calls the dispatch")
	}
	version := ""
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == ".version" {
			version = f[1]
		}
	}
	if version == "" || versionLess(version, b.Manifest.MinPTX) {
		t.Errorf("patched image declares .version %q, below the module's min_ptx %s", version, b.Manifest.MinPTX)
	}
	out, err = patch(filepath.Join("..", "..", "devrt", "testdata", "ptx", "sm52.ptx"))
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.HasPrefix(out, "unpatched target-too-low") {
		t.Errorf("sm_52 image: %v %q, want unpatched target-too-low", err, out)
	}
}
