package programs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/gpubpf/verifier"
)

// mixedDir is a probe directory holding testdata/dir/mixed.bpf.c's object
// and the descriptor desc as mixed.json.
func mixedDir(t *testing.T, desc string) string {
	t.Helper()
	dir := t.TempDir()
	buildObject(t, filepath.Join("testdata", "dir", "mixed.bpf.c"), filepath.Join(dir, "mixed.bpf.o"))
	writeFile(t, dir, "mixed.json", desc)
	return dir
}

const mixedViews = `"views": [{"map": "mixed_counts", "kind": "counters", "fields": ["exits", "spins"]}]`

// A descriptor that lists no programs gets every program of the object
// verified one by one: the one that passes runs, and each other is named
// with its own reason (the loop nothing bounds, with its source line; the
// memory-access point gpuext does not instrument), instead of the whole
// object being refused.
func TestLoadDirPerProgramVerdicts(t *testing.T) {
	d, err := LoadDir(mixedDir(t, `{"name": "mixed", "description": "three verdicts", `+mixedViews+`}`))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := d.Get("mixed")
	if got := strings.Join(p.Programs, ","); got != "mixed_ok" {
		t.Fatalf("programs that run: %s, want mixed_ok", got)
	}
	if len(p.Refused) != 2 || p.Refused[0].Program != "mixed_mem" || p.Refused[1].Program != "mixed_spin" {
		t.Fatalf("refused %+v, want mixed_mem and mixed_spin", p.Refused)
	}
	mem, spin := p.Refused[0], p.Refused[1]
	for _, want := range []string{"memory-access attach point", "every load and store", "gpuext instruments a kernel's entry and exit only"} {
		if mem.Section != "kprobe/__memcapture" || !strings.Contains(mem.Reason, want) {
			t.Errorf("mixed_mem refused in %q for %q, want it to say %q", mem.Section, mem.Reason, want)
		}
	}
	for _, want := range []string{"unbounded loop", "mixed.bpf.c:", "mixed_spin"} {
		if spin.Section != "gpuext/kernel_entry" || !strings.Contains(spin.Reason, want) {
			t.Errorf("mixed_spin refused in %q for %q, want it to say %q", spin.Section, spin.Reason, want)
		}
	}
	// the compiled module holds the program that runs, not the refused ones
	spec, err := d.Spec("mixed")
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Programs) != 1 || spec.Programs["mixed_ok"] == nil {
		t.Errorf("spec programs %v, want only mixed_ok", spec.Programs)
	}
	if _, err := Builtin().With(d); err != nil {
		t.Fatal(err)
	}
}

// A descriptor selects programs: the others are neither run nor an error
// (before, every program had to be listed). A selection of only refused
// programs is an error naming each with its reason, the verifier's error
// kept in the chain.
func TestLoadDirSelectsPrograms(t *testing.T) {
	d, err := LoadDir(mixedDir(t, `{"name": "mixed", "description": "d", "programs": ["mixed_ok"], `+mixedViews+`}`))
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := d.Get("mixed"); strings.Join(p.Programs, ",") != "mixed_ok" || len(p.Refused) != 0 {
		t.Errorf("selected mixed_ok: runs %v, refused %+v", p.Programs, p.Refused)
	}
	dir := mixedDir(t, `{"name": "mixed", "description": "d", "programs": ["mixed_spin", "mixed_mem"], `+mixedViews+`}`)
	_, err = LoadDir(dir)
	var ve *verifier.Error
	if !errors.Is(err, ErrBadProbeDir) || !errors.Is(err, ErrNoProgramRuns) || !errors.As(err, &ve) || !errors.Is(err, verifier.ErrUnboundedLoop) {
		t.Fatalf("err %v, want no program runs with the verifier's unbounded loop in the chain", err)
	}
	for _, want := range []string{filepath.Join(dir, "mixed.json") + ": ", "no program of mixed.bpf.o passes the device verifier: ",
		`program mixed_mem (section "kprobe/__memcapture") refused: `, "memory-access attach point",
		`program mixed_spin (section "gpuext/kernel_entry") refused: `, "unbounded loop"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err %q does not say %q", err, want)
		}
	}
}

// Describe reports the real reason: an object whose only program has a
// loop nothing bounds (and whose map no view can show, as bpftime's
// directly_run) is refused for the loop, not for "no map a view can
// show"; with one program that passes, only that one is described.
func TestDescribeGivesTheVerdicts(t *testing.T) {
	dir := t.TempDir()
	buildObject(t, filepath.Join("testdata", "dir", "spin.bpf.c"), filepath.Join(dir, "spin.bpf.o"))
	_, err := Describe("spin", "spin.bpf.o", readObject(t, filepath.Join(dir, "spin.bpf.o")))
	if !errors.Is(err, verifier.ErrUnboundedLoop) || strings.Contains(err.Error(), "view") {
		t.Fatalf("err %v, want the unbounded loop", err)
	}
	for _, want := range []string{`program spin_run (section "gpuext/kernel_entry") refused`, "unbounded loop", "spin.bpf.c:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err %q does not say %q", err, want)
		}
	}
	mixed := mixedDir(t, `{}`)
	p, err := Describe("mixed", "mixed.bpf.o", readObject(t, filepath.Join(mixed, "mixed.bpf.o")))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(p.Programs, ",") != "mixed_ok" || len(p.Refused) != 2 {
		t.Errorf("described programs %v refused %+v", p.Programs, p.Refused)
	}
}

func readObject(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
