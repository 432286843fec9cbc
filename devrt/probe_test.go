package devrt

// Tests of the device-probe splice and its integration in the interposer
// (docs/device-probes.md, "Device probes in the interposer"): the PTX
// patcher on hand-written nvcc-style modules (golden files, -update
// rewrites them), the image inspection on synthetic fatbins, and the
// interposer against the fake libcuda: what the "driver" received, the
// per-image status and the copied-out maps.

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/devrt/probe"
)

var update = flag.Bool("update", false, "rewrite devrt/testdata/ptx/*.golden")

// patchFile runs ptxpatch_cli on a file; the output is the patched PTX or "unpatched REASON".
func patchFile(t *testing.T, conf, frag, in string) string {
	t.Helper()
	c := exec.Command(filepath.Join(built(t), "ptxpatch_cli"), "-c", conf, frag, in)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 3 {
		return string(out)
	}
	if err != nil {
		t.Fatalf("ptxpatch_cli %s: %v\n%s", in, err, stderr.String())
	}
	return string(out)
}

// entryBodies returns each .entry's name and body text (from its opening brace to the matching one).
func entryBodies(ptx string) map[string]string {
	bodies := map[string]string{}
	rest := ptx
	for {
		i := strings.Index(rest, ".entry ")
		if i < 0 {
			return bodies
		}
		rest = rest[i+len(".entry "):]
		name := rest[:strings.IndexAny(rest, "( \n{")]
		b := strings.Index(rest, "{")
		depth, j := 0, b
		for ; j < len(rest); j++ {
			if rest[j] == '{' {
				depth++
			} else if rest[j] == '}' {
				depth--
				if depth == 0 {
					break
				}
			}
		}
		bodies[name] = rest[b : j+1]
		rest = rest[j:]
	}
}

func TestPTXPatchGolden(t *testing.T) {
	frag := filepath.Join("testdata", "ptx", "fragment.ptx")
	fragText, err := os.ReadFile(frag)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		probed    []string // entries that must carry the probe calls
		unprobed  []string
		unpatched string // reason prefix when the module must stay as it is
		version   string
	}{
		{name: "vecadd", probed: []string{"_Z6vecAddPKfS0_Pfi"}, version: ".version 9.0"},
		{name: "predret", probed: []string{"_Z5scalePfif"}, version: ".version 8.5"},
		{name: "multi", probed: []string{"_Z4fillPii", "_Z5emptyv"}, unprobed: []string{"_Z4skipPi"}, version: ".version 9.0"},
		{name: "version70", probed: []string{"_Z3incPi"}, version: ".version 7.8"},
		{name: "sm52", unpatched: "target-too-low:sm_52<sm_70"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := filepath.Join("testdata", "ptx", tc.name+".ptx")
			conf := filepath.Join("testdata", "ptx", tc.name+".conf")
			if _, err := os.Stat(conf); err != nil {
				conf = filepath.Join("testdata", "ptx", "fragment.conf")
			}
			got := patchFile(t, conf, frag, in)
			golden := filepath.Join("testdata", "ptx", tc.name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from %s (run with -update after checking the diff)\ngot:\n%s", in, golden, got)
			}
			if tc.unpatched != "" {
				if !strings.HasPrefix(got, "unpatched "+tc.unpatched) {
					t.Fatalf("want unpatched %s, got:\n%s", tc.unpatched, got)
				}
				return
			}
			orig, _ := os.ReadFile(in)
			// the header is kept (the version raised where needed), the fragment follows it once
			if !strings.Contains(got, tc.version+"\n") {
				t.Errorf("patched module lacks %q", tc.version)
			}
			if strings.Count(got, string(bytes.TrimSpace(fragText))) != 1 {
				t.Errorf("fragment not inserted exactly once")
			}
			if strings.Index(got, "__gpuext_probe_entry(") > strings.Index(got, ".entry ") {
				t.Errorf("fragment comes after the first .entry")
			}
			bodies := entryBodies(got)
			origBodies := entryBodies(string(orig))
			for _, e := range tc.probed {
				b := bodies[e]
				id := fmt.Sprintf("0x%016x", probe.KernelID(e))
				if strings.Count(b, "call.uni __gpuext_probe_entry") != 1 || !strings.Contains(b, "[__gpuext_kid], "+id+";") {
					t.Errorf("%s: no entry call with kernel id %s:\n%s", e, id, b)
				}
				if strings.Count(b, "call __gpuext_probe_exit") != 1 || strings.Count(b, "$__gpuext_exit:") != 1 {
					t.Errorf("%s: not exactly one exit block:\n%s", e, b)
				}
				// every ret/exit of the original became a branch to the exit block, whose ret is the only one left
				nret := strings.Count(origBodies[e], "ret;") + strings.Count(origBodies[e], "exit;")
				if n := strings.Count(b, "bra $__gpuext_exit;"); n != nret {
					t.Errorf("%s: %d branches to the exit block, want %d (one per ret/exit)", e, n, nret)
				}
				if strings.Count(b, "ret;") != 1 || strings.Contains(b, "\texit;") {
					t.Errorf("%s: a ret/exit escaped the exit block:\n%s", e, b)
				}
				// the entry call runs before the first instruction of the original body
				callAt := strings.Index(b, "call.uni __gpuext_probe_entry")
				for _, line := range strings.Split(origBodies[e], "\n")[1:] {
					l := strings.TrimSpace(line)
					if l == "" || strings.HasPrefix(l, ".reg") || strings.HasPrefix(l, ".local") || strings.HasPrefix(l, "//") {
						continue
					}
					if at := strings.Index(b, l); at >= 0 && at < callAt {
						t.Errorf("%s: %q runs before the entry call", e, l)
					}
					break
				}
			}
			for _, e := range tc.unprobed {
				if bodies[e] != origBodies[e] {
					t.Errorf("%s should be unchanged:\n%s", e, bodies[e])
				}
			}
		})
	}
}

// KernelID in C and Go agree (the host decodes ids the device wrote).
func TestKernelIDMatchesGo(t *testing.T) {
	got := patchFile(t, filepath.Join("testdata", "ptx", "fragment.conf"), filepath.Join("testdata", "ptx", "fragment.ptx"),
		filepath.Join("testdata", "ptx", "vecadd.ptx"))
	want := fmt.Sprintf("0x%016x", probe.KernelID("_Z6vecAddPKfS0_Pfi"))
	if !strings.Contains(got, want) {
		t.Fatalf("patched vecadd has no kernel id %s", want)
	}
}

var _ = binary.LittleEndian
