package verifier

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/gpuext/gpuext/gpubpf/internal/bpfc"
)

// wantRe matches `// want: "substring" at line N` (the substring Go-quoted).
var wantRe = regexp.MustCompile(`// want: ("(?:[^"\\]|\\.)*") at line (\d+)`)

func compileCorpus(t *testing.T, file string, flags ...string) *ebpf.CollectionSpec {
	t.Helper()
	obj := bpfc.CompileFlags(t, file, flags, "testdata", bpfc.ABIIncludeDir(t))
	spec, err := ebpf.LoadCollectionSpec(obj)
	if err != nil {
		t.Fatalf("load %s: %v", obj, err)
	}
	return spec
}

// Every program of testdata/accept verifies, and the verifier reports what
// it used.
func TestCorpusAccept(t *testing.T) {
	files, _ := filepath.Glob("testdata/accept/*.bpf.c")
	if len(files) == 0 {
		t.Fatal("no accept corpus")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			spec := compileCorpus(t, f)
			rep, err := VerifyCollection(spec)
			if err != nil {
				t.Fatalf("rejected: %v", err)
			}
			if len(rep.Programs) == 0 {
				t.Fatal("no device program verified")
			}
			for _, p := range rep.Programs {
				t.Logf("%s: %d insns, stack %d, states %d, loops %d, helpers %v, maps %v", p.Prog, p.Insns, p.MaxStack, p.States, p.Loops, p.Helpers, p.Maps)
				if p.Insns == 0 || p.States < p.Insns/2 {
					t.Errorf("%s: implausible counts %+v", p.Prog, p)
				}
			}
		})
	}
}

// Every program of testdata/reject is rejected with the message and at the
// source line its "// want:" comment names.
func TestCorpusReject(t *testing.T) {
	files, _ := filepath.Glob("testdata/reject/*.bpf.c")
	if len(files) == 0 {
		t.Fatal("no reject corpus")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			want, line := wantOf(t, f)
			spec := compileCorpus(t, f)
			_, err := VerifyCollection(spec)
			if err == nil {
				t.Fatalf("accepted, want rejection %q", want)
			}
			var ve *Error
			if !errors.As(err, &ve) {
				t.Fatalf("error %v is not a *verifier.Error", err)
			}
			if !strings.Contains(ve.Msg, want) {
				t.Errorf("error %q does not contain %q", err, want)
			}
			wantSrc := filepath.Base(f) + ":" + strconv.Itoa(line)
			if ve.Source != wantSrc {
				t.Errorf("error at %q, want %q: %v", ve.Source, wantSrc, err)
			}
			if !strings.Contains(err.Error(), "insn "+strconv.Itoa(ve.Insn)) {
				t.Errorf("error text %q does not name insn %d", err, ve.Insn)
			}
			t.Log(err)
		})
	}
}

// wantOf reads a reject-corpus file's "// want: "..." at line N" comment.
func wantOf(t *testing.T, f string) (string, int) {
	t.Helper()
	src, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	m := wantRe.FindStringSubmatch(string(src))
	if m == nil {
		t.Fatalf("%s has no // want: \"...\" at line N comment", f)
	}
	want, err := strconv.Unquote(m[1])
	if err != nil || want == "" {
		t.Fatalf("%s: want %s: %v", f, m[1], err)
	}
	line, err := strconv.Atoi(m[2])
	if err != nil {
		t.Fatalf("%s: line %s: %v", f, m[2], err)
	}
	return want, line
}

// The corpus built for BPF v3 (32-bit ALU and jumps, as -mcpu=v3 emits):
// the same verdicts and messages (lines may move, so they are not checked).
func TestCorpusV3(t *testing.T) {
	for _, dir := range []string{"accept", "reject"} {
		files, _ := filepath.Glob("testdata/" + dir + "/*.bpf.c")
		if len(files) == 0 {
			t.Fatalf("no %s corpus", dir)
		}
		for _, f := range files {
			t.Run(dir+"/"+filepath.Base(f), func(t *testing.T) {
				t.Parallel()
				_, err := VerifyCollection(compileCorpus(t, f, "-mcpu=v3"))
				if dir == "accept" {
					if err != nil {
						t.Fatalf("rejected: %v", err)
					}
					return
				}
				want, _ := wantOf(t, f)
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("got %v, want %q", err, want)
				}
			})
		}
	}
}
