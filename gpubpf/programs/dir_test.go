package programs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/gpubpf/verifier"
	"github.com/gpuext/gpuext/lib/testutil"
)

// buildObject compiles a probe source with clang as the SDK's probe.mk does.
func buildObject(t *testing.T, src, out string) { testutil.Build(t, src, out) }

// exampleDir is a probe directory holding the two example probes (examples/probes).
func exampleDir(t *testing.T) string {
	return testutil.ExampleDir(t, "kernel-block-hist", "slow-blocks")
}

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadDirExamples(t *testing.T) {
	dir := exampleDir(t)
	writeFile(t, dir, "README", "not a probe")
	writeFile(t, dir, ".hidden.json", "{")
	d, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(d.Names(), ","); got != "kernel-block-hist,slow-blocks" {
		t.Fatalf("names %s", got)
	}
	all, err := Builtin().With(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := all.Check([]string{"launch-stats", "kernel-block-hist", "slow-blocks"}); err != nil {
		t.Fatal(err)
	}
	p, _ := all.Get("slow-blocks")
	if p.Object != "slow-blocks.bpf.o" || p.Source != filepath.Join(dir, "slow-blocks.json") || p.Views[0].LastOrDefault() != 20 {
		t.Errorf("slow-blocks: object %s source %s last %d", p.Object, p.Source, p.Views[0].LastOrDefault())
	}
	if err := Builtin().Check([]string{"slow-blocks"}); !errors.Is(err, ErrUnknownProbe) {
		t.Errorf("the built-in catalog knows a directory's probe: %v", err)
	}
}

// Every bad entry of a probe directory is an error naming the file and
// what is wrong in it; LoadDir loads nothing then.
func TestLoadDirRejectsBadEntries(t *testing.T) {
	base := exampleDir(t)
	hist, _ := os.ReadFile(filepath.Join(base, "kernel-block-hist.json"))
	slow, _ := os.ReadFile(filepath.Join(base, "slow-blocks.json"))
	histObj := filepath.Join(base, "kernel-block-hist.bpf.o")
	racyObj := filepath.Join(t.TempDir(), "racy.bpf.o")
	buildObject(t, filepath.Join("testdata", "dir", "racy.bpf.c"), racyObj)
	h := func(old, new string) string { return strings.Replace(string(hist), old, new, 1) }

	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string) // writes into an empty directory
		file  string                         // the file the error names
		want  []string
	}{
		{"unknown field", func(t *testing.T, dir string) {
			copyFile(t, histObj, dir, "kernel-block-hist.bpf.o")
			writeFile(t, dir, "kernel-block-hist.json", h(`"programs"`, `"progams": [], "programs"`))
		}, "kernel-block-hist.json", []string{"progams"}},
		{"name is not the file's", func(t *testing.T, dir string) {
			writeFile(t, dir, "other.json", string(hist))
		}, "other.json", []string{"name", `"kernel-block-hist" must match the file name "other"`}},
		{"a built-in probe's name", func(t *testing.T, dir string) {
			writeFile(t, dir, "launch-count.json", h(`"kernel-block-hist"`, `"launch-count"`))
		}, "launch-count.json", []string{"name", "built-in probe"}},
		{"descriptor is a symlink", func(t *testing.T, dir string) {
			if err := os.Symlink(filepath.Join(base, "kernel-block-hist.json"), filepath.Join(dir, "kernel-block-hist.json")); err != nil {
				t.Fatal(err)
			}
		}, "kernel-block-hist.json", []string{"not a regular file"}},
		{"object is a symlink", func(t *testing.T, dir string) {
			writeFile(t, dir, "kernel-block-hist.json", string(hist))
			if err := os.Symlink(histObj, filepath.Join(dir, "kernel-block-hist.bpf.o")); err != nil {
				t.Fatal(err)
			}
		}, "kernel-block-hist.json", []string{"object", "kernel-block-hist.bpf.o is not a regular file"}},
		{"object is a directory", func(t *testing.T, dir string) {
			writeFile(t, dir, "kernel-block-hist.json", string(hist))
			if err := os.Mkdir(filepath.Join(dir, "kernel-block-hist.bpf.o"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, "kernel-block-hist.json", []string{"object", "not a regular file"}},
		{"descriptor too big", func(t *testing.T, dir string) {
			writeFile(t, dir, "kernel-block-hist.json", h(`"views"`, `"description2": "`+strings.Repeat("x", MaxDescriptorBytes)+`", "views"`))
		}, "kernel-block-hist.json", []string{"larger than 65536 bytes"}},
		{"object too big", func(t *testing.T, dir string) {
			writeFile(t, dir, "kernel-block-hist.json", string(hist))
			f, err := os.Create(filepath.Join(dir, "kernel-block-hist.bpf.o"))
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(MaxObjectBytes + 1); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}, "kernel-block-hist.json", []string{"object", "larger than 16777216 bytes"}},
		{"object outside the directory", func(t *testing.T, dir string) {
			writeFile(t, dir, "kernel-block-hist.json", h(`"programs"`, `"object": "../kernel-block-hist.bpf.o", "programs"`))
		}, "kernel-block-hist.json", []string{"object", `"../kernel-block-hist.bpf.o" must be a file name in the directory`}},
		{"object is not ELF", func(t *testing.T, dir string) {
			writeFile(t, dir, "kernel-block-hist.json", string(hist))
			writeFile(t, dir, "kernel-block-hist.bpf.o", "#!/bin/sh\n")
		}, "kernel-block-hist.json", []string{"object", "not a BPF ELF object"}},
		{"object the verifier refuses", func(t *testing.T, dir string) {
			copyFile(t, racyObj, dir, "racy.bpf.o")
			writeFile(t, dir, "racy.json", `{"name": "racy", "description": "d", "programs": ["racy_entry"],
				"views": [{"map": "racy_counts", "kind": "counters", "fields": ["n"]}]}`)
		}, "racy.json", []string{"no program of racy.bpf.o passes the device verifier: ", `program racy_entry (section "gpuext/kernel_entry") refused: `, "prog racy_entry: insn ", "racy.bpf.c:"}},
		{"program missing", func(t *testing.T, dir string) {
			copyFile(t, histObj, dir, "kernel-block-hist.bpf.o")
			writeFile(t, dir, "kernel-block-hist.json", h(`"kbh_exit"`, `"kbh_exitt"`))
		}, "kernel-block-hist.json", []string{"programs[1]", "kbh_exitt"}},
		{"hash key of another size", func(t *testing.T, dir string) {
			copyFile(t, histObj, dir, "kernel-block-hist.bpf.o")
			writeFile(t, dir, "kernel-block-hist.json", h(`{"name": "bucket", "type": "u32"}`, `{"name": "bucket", "type": "u64"}, {"name": "x", "type": "u8"}`))
		}, "kernel-block-hist.json", []string{"views[0].key", "take 24 bytes", "16-byte keys"}},
		{"unknown field type", func(t *testing.T, dir string) {
			copyFile(t, histObj, dir, "kernel-block-hist.bpf.o")
			writeFile(t, dir, "kernel-block-hist.json", h(`"type": "u64"`, `"type": "float"`))
		}, "kernel-block-hist.json", []string{"views[0].value[0].type", `"float"`}},
		{"string field without a size", func(t *testing.T, dir string) {
			copyFile(t, histObj, dir, "kernel-block-hist.bpf.o")
			writeFile(t, dir, "kernel-block-hist.json", h(`"type": "u64"`, `"type": "string"`))
		}, "kernel-block-hist.json", []string{"views[0].value[0].size", "1..256"}},
		{"top out of range", func(t *testing.T, dir string) {
			copyFile(t, histObj, dir, "kernel-block-hist.bpf.o")
			writeFile(t, dir, "kernel-block-hist.json", h(`"top": 50`, `"top": 5000`))
		}, "kernel-block-hist.json", []string{"views[0].top", "5000"}},
		{"records view of a hash", func(t *testing.T, dir string) {
			copyFile(t, histObj, dir, "kernel-block-hist.bpf.o")
			writeFile(t, dir, "kernel-block-hist.json", h(`"kind": "hash", "top": 50,
     "key": [{"name": "kernel", "type": "x64"}, {"name": "bucket", "type": "u32"}],
     "value"`, `"kind": "records", "record"`))
		}, "kernel-block-hist.json", []string{"views[0].map", "needs a ring buffer"}},
		{"record layout in a hash view", func(t *testing.T, dir string) {
			copyFile(t, filepath.Join(base, "slow-blocks.bpf.o"), dir, "slow-blocks.bpf.o")
			writeFile(t, dir, "slow-blocks.json", strings.Replace(string(slow), `"kind": "records"`, `"kind": "hash"`, 1))
		}, "slow-blocks.json", []string{"views[0].record", "only a records view"}},
		{"hash view of a ring buffer", func(t *testing.T, dir string) {
			copyFile(t, filepath.Join(base, "slow-blocks.bpf.o"), dir, "slow-blocks.bpf.o")
			writeFile(t, dir, "slow-blocks.json", strings.Replace(string(slow), `"kind": "records", "last": 20,
     "record"`, `"kind": "hash", "value": [{"name": "v", "type": "u64"}], "key"`, 1))
		}, "slow-blocks.json", []string{"views[0].map", "a hash view needs a hash"}},
		{"kernel name too long", func(t *testing.T, dir string) {
			copyFile(t, histObj, dir, "kernel-block-hist.bpf.o")
			writeFile(t, dir, "kernel-block-hist.json", h(`"views"`, `"kernels": ["_Z`+strings.Repeat("k", MaxKernelNameBytes)+`"], "views"`))
		}, "kernel-block-hist.json", []string{"kernels[0]", "4098-byte name, at most 4096"}},
		{"retarget of programs that name no kernel", func(t *testing.T, dir string) {
			copyFile(t, histObj, dir, "kernel-block-hist.bpf.o")
			writeFile(t, dir, "kernel-block-hist.json", h(`"views"`, `"retarget": true, "views"`))
		}, "kernel-block-hist.json", []string{"retarget", `program "kbh_entry"`, `"gpuext/kernel_entry", which names no kernel to replace`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			_, err := LoadDir(dir)
			if err == nil {
				t.Fatal("loaded")
			}
			if !errors.Is(err, ErrBadProbeDir) {
				t.Errorf("err %v does not match ErrBadProbeDir", err)
			}
			msg := err.Error()
			for _, w := range append([]string{filepath.Join(dir, tc.file) + ": "}, tc.want...) {
				if !strings.Contains(msg, w) {
					t.Errorf("err %q does not say %q", msg, w)
				}
			}
		})
	}
}

// The verifier's refusal stays in the chain: a caller can show the
// program, the instruction and the source line.
func TestLoadDirKeepsTheVerifierError(t *testing.T) {
	dir := t.TempDir()
	buildObject(t, filepath.Join("testdata", "dir", "racy.bpf.c"), filepath.Join(dir, "racy.bpf.o"))
	writeFile(t, dir, "racy.json", `{"name": "racy", "description": "d", "programs": ["racy_entry"],
		"views": [{"map": "racy_counts", "kind": "counters", "fields": ["n"]}]}`)
	_, err := LoadDir(dir)
	var ve *verifier.Error
	if !errors.As(err, &ve) || ve.Prog != "racy_entry" || !strings.HasSuffix(strings.Split(ve.Source, ":")[0], "racy.bpf.c") {
		t.Fatalf("err %v: want a *verifier.Error of racy_entry at racy.bpf.c", err)
	}
}

// Two probes of a directory (or one and a built-in) with a map of one
// name cannot be selected together: refused when the directory loads.
func TestWithRefusesSharedNames(t *testing.T) {
	dir := exampleDir(t)
	slow, _ := os.ReadFile(filepath.Join(dir, "slow-blocks.json"))
	writeFile(t, dir, "slow-blocks-copy.json", strings.Replace(strings.Replace(string(slow), `"slow-blocks"`, `"slow-blocks-copy"`, 1),
		`"programs"`, `"object": "slow-blocks.bpf.o", "programs"`, 1))
	d, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Builtin().With(d)
	if err == nil || !errors.Is(err, ErrBadProbeDir) || !strings.Contains(err.Error(), filepath.Join(dir, "slow-blocks-copy.json")+": ") ||
		!strings.Contains(err.Error(), `is also a map of probe "slow-blocks" (`+filepath.Join(dir, "slow-blocks.json")+`)`) {
		t.Fatalf("err = %v, want the shared map named with both probes", err)
	}
}

func copyFile(t *testing.T, src, dir, name string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
