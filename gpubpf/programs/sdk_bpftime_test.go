package programs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/lib/testutil"
)

// A bpftime-style source as bpftime ships its examples (an unused
// ebpf_puts declaration beside the helpers it does use, <vmlinux.h> and
// <bpf/bpf_helpers.h>) builds with nothing but the SDK: `make sdk` into a
// directory outside the tree, the probe Makefile template beside the
// source, probe.mk's -Wall -Werror. The unused declaration stays a
// warning the build prints, a real error still fails the build, and the
// installed object loads from the probe directory with both its programs
// running.
func TestSDKBuildsBpftimeSources(t *testing.T) {
	for _, tool := range []string{"make", "clang"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.SkipOrFail(t, "%s not found (test/lab/install-deps.sh installs it): %v", tool, err)
		}
	}
	root, tmp := testutil.RepoRoot(), t.TempDir()
	runMake := func(dir string, args ...string) (string, error) {
		b, err := exec.Command("make", append([]string{"-C", dir}, args...)...).CombinedOutput()
		return string(b), err
	}
	sdk, src, probeDir := filepath.Join(tmp, "sdk"), filepath.Join(tmp, "call-counter"), filepath.Join(tmp, "probedir")
	if out, err := runMake(root, "-s", "sdk", "SDK_DIR="+sdk); err != nil {
		t.Fatalf("make sdk: %v\n%s", err, out)
	}
	td := filepath.Join(root, "gpubpf", "compile", "testdata", "bpftime")
	text := string(readObject(t, filepath.Join(td, "call_counter.bpf.c")))
	// what every bpftime example declares, used or not
	text = strings.Replace(text, "static const u64 (*bpf_get_globaltimer)", "static const void (*ebpf_puts)(const char *) = (void *)501;\nstatic const u64 (*bpf_get_globaltimer)", 1)
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, src, "call-counter.bpf.c", text)
	writeFile(t, src, "call-counter.json", string(readObject(t, filepath.Join(td, "call-counter.json"))))
	writeFile(t, src, "Makefile", string(readObject(t, filepath.Join(root, "sdk", "Makefile.probe.template"))))
	out, err := runMake(src, "GPUEXT_SDK="+sdk)
	if err != nil {
		t.Fatalf("make with the SDK's probe.mk: %v\n%s", err, out)
	}
	if !strings.Contains(out, "unused variable 'ebpf_puts'") || !strings.Contains(out, "include/bpftime") {
		t.Errorf("the build should show the unused ebpf_puts as a warning and build against include/bpftime:\n%s", out)
	}
	if out, err := runMake(src, "-s", "GPUEXT_SDK="+sdk, "install", "PROBE_DIR="+probeDir); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	d, err := LoadDir(probeDir)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := d.Get("call-counter"); strings.Join(p.Programs, ",") != "cc_entry,cc_exit" || len(p.Refused) != 0 {
		t.Errorf("call-counter: runs %v, refused %+v", p.Programs, p.Refused)
	}
	// a real error still fails the build
	writeFile(t, src, "call-counter.bpf.c", strings.Replace(text, "u64 ts = bpf_get_globaltimer();", "u64 ts = bpf_get_globaltimer(); int unset; ts += unset;", 1))
	if out, err := runMake(src, "GPUEXT_SDK="+sdk); err == nil || !strings.Contains(out, "uninitialized") {
		t.Errorf("a use of an uninitialized variable built (err %v):\n%s", err, out)
	}
}
