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
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/lib/testutil"
)

var update = flag.Bool("update", false, "rewrite devrt/testdata/ptx/*.golden")

// patchFile runs ptxpatch_cli on a file; the output is the patched PTX or "unpatched REASON".
func patchFile(t *testing.T, conf, frag, in string) string {
	t.Helper()
	c := exec.Command(filepath.Join(testutil.BuildDevrt(t), "ptxpatch_cli"), "-c", conf, frag, in)
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
		input     string   // testdata/ptx/INPUT.ptx (default name)
		conf      string   // testdata/ptx/CONF.conf (default name, else fragment)
		guard     bool     // the conf asks for the thread-0 site guard at entry
		guardExit bool     // ... and at exit
		inline    bool     // the conf asks for the inline form (testdata/ptx/inline_*.ptx)
		late      string   // inline: the entry block goes right after this line (entry_late), and a copy runs at the exit
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
		{name: "predret_guard", input: "predret", conf: "guard", guard: true, guardExit: true, probed: []string{"_Z5scalePfif"}, version: ".version 8.5"},
		{name: "multi_guard", input: "multi", conf: "multi_guard", guard: true, probed: []string{"_Z4fillPii", "_Z5emptyv"}, unprobed: []string{"_Z4skipPi"}, version: ".version 9.0"},
		{name: "predret_inline", input: "predret", conf: "inline_guard", guard: true, guardExit: true, inline: true, probed: []string{"_Z5scalePfif"}, version: ".version 8.5"},
		{name: "multi_inline", input: "multi", conf: "multi_inline", inline: true, probed: []string{"_Z4fillPii", "_Z5emptyv"}, unprobed: []string{"_Z4skipPi"}, version: ".version 9.0"},
		// the first global load after a bounds check and before any label: the entry block follows it
		{name: "late_inline", input: "late", conf: "inline_guard", guard: true, guardExit: true, inline: true, late: "ld.global.u32 \t%r6, [%rd4];", probed: []string{"_Z4bumpPjj"}, version: ".version 8.0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			input, confName := tc.input, tc.conf
			if input == "" {
				input = tc.name
			}
			if confName == "" {
				confName = tc.name
			}
			in := filepath.Join("testdata", "ptx", input+".ptx")
			conf := filepath.Join("testdata", "ptx", confName+".conf")
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
				id := fmt.Sprintf("0x%016xU", abi.KernelID(e))
				entryCall := "call.uni __gpuext_probe_entry"
				if tc.guard {
					// only thread 0 of the block calls: a plain call, branched around by the others
					entryCall = "call __gpuext_probe_entry"
					for skip, want := range map[string]bool{"$__gpuext_skip_entry": true, "$__gpuext_skip_exit": tc.guardExit} {
						n := 0
						if want {
							n = 1
						}
						// the inline form branches on the body's one thread-0 predicate, read at the entry site
						guardPred := "%__gpuext_g"
						if tc.inline {
							guardPred = "%__gpuext_nt0"
						}
						if strings.Count(b, "@"+guardPred+" bra "+skip+";") != n || strings.Count(b, skip+":") != n {
							t.Errorf("%s: want %d guard(s) branching to %s:\n%s", e, n, skip, b)
						}
					}
					if tc.inline && strings.Count(b, "setp.ne.u32 %__gpuext_nt0, ") != 1 {
						t.Errorf("%s: the thread-0 predicate is not set exactly once:\n%s", e, b)
					}
				} else if strings.Contains(b, "__gpuext_g") || strings.Contains(b, "__gpuext_nt0") {
					t.Errorf("%s: a guard without guard_* in module.conf:\n%s", e, b)
				}
				exitCall := "call __gpuext_probe_exit"
				if tc.inline {
					// the blocks instead of the calls: the template's labels, made unique per site, and the kernel id
					blocks := 2
					if tc.late != "" {
						blocks = 3 // the late entry block, its copy at the exit, the exit block
					}
					if strings.Contains(b, "__gpuext_probe_") || strings.Contains(b, "@GX") || strings.Count(b, "mov.b64 %__gxd0, "+id+";") != blocks {
						t.Errorf("%s: not the inline form with kernel id %s:\n%s", e, id, b)
					}
					entryCall, exitCall = "$__gpuext_i", "_exit_done:"
				} else if !strings.Contains(b, "mov.b64 %__gpuext_kid, "+id+";") {
					t.Errorf("%s: no kernel id %s:\n%s", e, id, b)
				}
				if strings.Count(b, entryCall+"") < 1 || (!tc.inline && strings.Count(b, entryCall) != 1) {
					t.Errorf("%s: no entry site:\n%s", e, b)
				}
				if strings.Count(b, exitCall) != 1 || strings.Count(b, "$__gpuext_exit:") != 1 {
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
				if tc.late != "" {
					// the entry block right after the load; the exit runs its copy (labels of its
					// own) when the flag says it did not run, then the exit block
					at := strings.Index(b, tc.late+"\n// gpuext probe: kernel entry, inline (site 0), after the first global load")
					flagSet := strings.Index(b, "mov.u32 %__gpuext_late, 1;")
					test := strings.Index(b, "@%__gpuext_latep bra $__gpuext_late_done;")
					if at < 0 || flagSet < at || test < flagSet || strings.Index(b, "$__gpuext_i0x_entry_done:") < test ||
						strings.Index(b, "$__gpuext_late_done:") < test || strings.Count(b, "bra $__gpuext_skip_entry_x;") != 1 {
						t.Errorf("%s: not the late entry site after %q:\n%s", e, tc.late, b)
					}
					continue
				}
				// the entry call runs before the first instruction of the original body
				callAt := strings.Index(b, "__gpuext_probe_entry")
				if tc.inline {
					callAt = strings.Index(b, "_entry_done:")
				}
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

// A kernel line holds a name of up to GX_CONF_MAX_KERNEL_NAME (4096)
// bytes, read whole (CUTLASS names reach 1,456 bytes; the parser cut lines
// at 1023 bytes, so such a kernel silently went unprobed): the listed
// kernel is probed and the others are not. A longer name, or a line past
// GX_CONF_MAX_LINE, is an error naming the line: never a cut name.
func TestPTXPatchLongKernelName(t *testing.T) {
	in, err := os.ReadFile(filepath.Join("testdata", "ptx", "multi.ptx"))
	if err != nil {
		t.Fatal(err)
	}
	nameOf := func(n int) string { return "_Z4fill" + strings.Repeat("x", n-len("_Z4fill")) }
	for _, n := range []int{512, 1456, 4096} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			long := nameOf(n)
			dir := t.TempDir()
			ptxFile, confFile := filepath.Join(dir, "multi.ptx"), filepath.Join(dir, "module.conf")
			if err := os.WriteFile(ptxFile, bytes.ReplaceAll(in, []byte("_Z4fillPii"), []byte(long)), 0o644); err != nil {
				t.Fatal(err)
			}
			conf := "version 1\nmin_ptx 7.8\nmin_target 70\nlaunch_time 0\nkernel " + long + "\nmap counts __gpuext_map_counts 80\n"
			if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
				t.Fatal(err)
			}
			got := patchFile(t, confFile, filepath.Join("testdata", "ptx", "fragment.ptx"), ptxFile)
			bodies := entryBodies(got)
			if !strings.Contains(bodies[long], "__gpuext_probe_entry") {
				t.Errorf("the kernel of a %d-byte name is not probed:\n%.400s", n, got)
			}
			for _, e := range []string{"_Z5emptyv", "_Z4skipPi"} {
				if b, ok := bodies[e]; !ok || strings.Contains(b, "__gpuext_probe") {
					t.Errorf("%s (not listed) is probed or missing:\n%s", e, b)
				}
			}
		})
	}
	for _, tc := range []struct{ name, line, want string }{
		{"name over the bound", "kernel " + nameOf(4097), "unpatched module.conf:5:kernel-name-too-long"},
		{"line over the bound", "# " + strings.Repeat("c", 8191), "unpatched module.conf:5:line-too-long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			confFile := filepath.Join(t.TempDir(), "module.conf")
			conf := "version 1\nmin_ptx 7.8\nmin_target 70\nlaunch_time 0\n" + tc.line + "\nmap counts __gpuext_map_counts 80\n"
			if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
				t.Fatal(err)
			}
			got := patchFile(t, confFile, filepath.Join("testdata", "ptx", "fragment.ptx"), filepath.Join("testdata", "ptx", "multi.ptx"))
			if strings.TrimSpace(got) != tc.want {
				t.Errorf("got %.200q, want %q", got, tc.want)
			}
		})
	}
}

// KernelID in C and Go agree (the host decodes ids the device wrote).
func TestKernelIDMatchesGo(t *testing.T) {
	got := patchFile(t, filepath.Join("testdata", "ptx", "fragment.conf"), filepath.Join("testdata", "ptx", "fragment.ptx"),
		filepath.Join("testdata", "ptx", "vecadd.ptx"))
	want := fmt.Sprintf("0x%016x", abi.KernelID("_Z6vecAddPKfS0_Pfi"))
	if !strings.Contains(got, want) {
		t.Fatalf("patched vecadd has no kernel id %s", want)
	}
}

// ---- synthetic images ----

// fbEntry is one entry of a synthetic fatbin container.
type fbEntry struct {
	kind    uint16 // 1 PTX, 2 ELF
	arch    uint32
	flags   uint64
	payload []byte // as stored (compressed if flags say so)
	usize   uint64 // uncompressed size (compressed entries)
}

// fatbin builds a container: 16-byte header, then entries with 64-byte headers and 8-aligned payloads.
func fatbin(entries ...fbEntry) []byte {
	var body []byte
	for _, e := range entries {
		padded := (len(e.payload) + 7) &^ 7
		h := make([]byte, 64)
		binary.LittleEndian.PutUint16(h[0:], e.kind)
		binary.LittleEndian.PutUint16(h[2:], 0x0101)
		binary.LittleEndian.PutUint32(h[4:], 64)
		binary.LittleEndian.PutUint64(h[8:], uint64(padded))
		binary.LittleEndian.PutUint32(h[16:], uint32(len(e.payload)))
		binary.LittleEndian.PutUint32(h[28:], e.arch)
		binary.LittleEndian.PutUint64(h[40:], 0x11|e.flags) // 64-bit, linux
		binary.LittleEndian.PutUint64(h[56:], e.usize)
		body = append(body, h...)
		body = append(body, e.payload...)
		body = append(body, make([]byte, padded-len(e.payload))...)
	}
	hdr := make([]byte, 16)
	binary.LittleEndian.PutUint32(hdr[0:], 0xBA55ED50)
	binary.LittleEndian.PutUint16(hdr[4:], 1)
	binary.LittleEndian.PutUint16(hdr[6:], 16)
	binary.LittleEndian.PutUint64(hdr[8:], uint64(len(body)))
	return append(hdr, body...)
}

func ptxEntry(t *testing.T, file string, arch uint32) fbEntry {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("testdata", "ptx", file))
	if err != nil {
		t.Fatal(err)
	}
	return fbEntry{kind: 1, arch: arch, payload: append(text, 0)}
}

// sassEntry is a stand-in cubin with code (a .text. section name), nothing a driver could run.
func sassEntry(arch uint32) fbEntry {
	elf := append([]byte("\x7fELF\x02\x01\x01"), make([]byte, 56)...)
	elf = append(elf, "\x00.shstrtab\x00.text._Z3foov\x00.nv.info\x00"...)
	return fbEntry{kind: 2, arch: arch, payload: append(elf, make([]byte, 40)...)}
}

// helperEntry is the code-less cubin CUDA 13's nvcc puts in a container of its own before a unit's container.
func helperEntry(arch uint32) fbEntry {
	elf := append([]byte("\x7fELF\x02\x01\x01"), make([]byte, 56)...)
	elf = append(elf, "\x00.shstrtab\x00.nv.rel.action\x00.nv.callgraph\x00"...)
	return fbEntry{kind: 2, arch: arch, payload: append(elf, make([]byte, 40)...)}
}

// lz4Literals is a valid LZ4 block holding data as one run of literals.
func lz4Literals(data []byte) []byte {
	n := len(data)
	var out []byte
	if n < 15 {
		out = append(out, byte(n<<4))
	} else {
		out = append(out, 0xf0)
		rest := n - 15
		for rest >= 255 {
			out = append(out, 255)
			rest -= 255
		}
		out = append(out, byte(rest))
	}
	return append(out, data...)
}

// zstdRaw is a valid zstd frame holding data in raw blocks.
func zstdRaw(data []byte) []byte {
	out := []byte{0x28, 0xb5, 0x2f, 0xfd, 0xa0} // magic; single segment, 4-byte content size
	out = binary.LittleEndian.AppendUint32(out, uint32(len(data)))
	for off := 0; ; {
		n := min(len(data)-off, 1<<16)
		last := 0
		if off+n == len(data) {
			last = 1
		}
		h := uint32(last) | uint32(n)<<3 // raw block
		out = append(out, byte(h), byte(h>>8), byte(h>>16))
		out = append(out, data[off:off+n]...)
		off += n
		if last == 1 {
			return out
		}
	}
}

// ---- the interposer with probes, against the fake driver ----

type probeRun struct {
	lines  []string
	stderr string
	pid    int
	images string // FAKECUDA_IMAGE_DIR
	probes string // $GPUEXT_TENANT_ACCT/probes
}

// probeTenant is a tenant whose directory holds probes/ (module.ptx + module.conf) unless withProbes is false.
func probeTenant(t *testing.T, id int, withProbes bool) *tenant {
	t.Helper()
	tn := newTenant(t, id, 0, "standard")
	if withProbes {
		dir := filepath.Join(tn.dir, "probes")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for src, dst := range map[string]string{"fragment.ptx": "module.ptx", "fragment.conf": "module.conf"} {
			b, err := os.ReadFile(filepath.Join("testdata", "ptx", src))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, dst), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	tn.extra = append(tn.extra, "GPUEXT_TENANT_DIR="+tn.dir, "FAKECUDA_PROBE_COUNTER=__gpuext_map_counts:40")
	return tn
}

// launchTimeOn sets launch_time 1 in the tenant's module.conf, as a probe
// that reads ctx->launch_ns makes the compiler do.
func (tn *tenant) launchTimeOn() {
	tn.t.Helper()
	conf := filepath.Join(tn.dir, "probes", "module.conf")
	b, err := os.ReadFile(conf)
	if err == nil {
		err = os.WriteFile(conf, bytes.Replace(b, []byte("launch_time 0"), []byte("launch_time 1"), 1), 0o644)
	}
	if err != nil {
		tn.t.Fatal(err)
	}
}

func (tn *tenant) runImages(env []string, steps ...string) probeRun {
	tn.t.Helper()
	images := tn.t.TempDir()
	c := tn.cmd("app_image", steps...)
	c.Env = append(c.Env, "FAKECUDA_IMAGE_DIR="+images)
	c.Env = append(c.Env, env...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		tn.t.Fatalf("app_image %v: %v\nstdout:\n%s\nstderr:\n%s", steps, err, stdout.String(), stderr.String())
	}
	return probeRun{lines: strings.Split(strings.TrimSpace(stdout.String()), "\n"), stderr: stderr.String(),
		pid: c.Process.Pid, images: images, probes: filepath.Join(tn.acct, "probes")}
}

func (r probeRun) image(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.images, name))
	if err != nil {
		t.Fatalf("the driver did not receive %s: %v", name, err)
	}
	return b
}

// status returns the status lines of the run's process as key=value maps, one per image.
func (r probeRun) status(t *testing.T) []map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.probes, fmt.Sprintf("%d.status", r.pid)))
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	var out []map[string]string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		kv := map[string]string{}
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			kv[k] = v
		}
		out = append(out, kv)
	}
	return out
}

type mapsFile struct {
	pid, image, count uint32
	seq               uint64
	tenant, final     uint32
	maps              map[string][]byte
}

// launches: the launch counter of the test probe's "counts" array (its
// second u64 after the map descriptor).
func (m mapsFile) launches() uint64 { return binary.LittleEndian.Uint64(m.maps["counts"][40:]) }

// contextMaps: image 0's maps files of the run's first and second context.
func (r probeRun) contextMaps(t *testing.T) (first, second mapsFile) {
	t.Helper()
	return readMaps(t, filepath.Join(r.probes, fmt.Sprintf("%d-0.maps", r.pid))),
		readMaps(t, filepath.Join(r.probes, fmt.Sprintf("%d-0-1.maps", r.pid)))
}

// readMaps decodes <pid>-<image>.maps (format in docs/device-probes.md).
func readMaps(t *testing.T, path string) mapsFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("maps file: %v", err)
	}
	if len(b) < 48 || string(b[:8]) != "GXPMAPS\x00" || binary.LittleEndian.Uint32(b[8:]) != 1 {
		t.Fatalf("maps file %s: bad header % x", path, b[:min(len(b), 48)])
	}
	m := mapsFile{pid: binary.LittleEndian.Uint32(b[12:]), image: binary.LittleEndian.Uint32(b[16:]),
		count: binary.LittleEndian.Uint32(b[20:]), seq: binary.LittleEndian.Uint64(b[24:]),
		tenant: binary.LittleEndian.Uint32(b[40:]), final: binary.LittleEndian.Uint32(b[44:]), maps: map[string][]byte{}}
	off := 48
	for i := uint32(0); i < m.count; i++ {
		if off+72 > len(b) {
			t.Fatalf("maps file truncated at map %d", i)
		}
		name := string(bytes.TrimRight(b[off:off+64], "\x00"))
		n := int(binary.LittleEndian.Uint64(b[off+64:]))
		off += 72
		if off+n > len(b) {
			t.Fatalf("maps file: map %s truncated", name)
		}
		m.maps[name] = b[off : off+n]
		off += (n + 7) &^ 7
	}
	if off != len(b) {
		t.Fatalf("maps file: %d trailing bytes", len(b)-off)
	}
	return m
}

// The descriptor of fragment.ptx's "counts" map, as the fragment initialises it.
var countsDescriptor = []byte{1, 0, 0, 0, 4, 0, 0, 0, 8, 0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0, 16, 0, 0, 0, 48, 0, 0, 0, 0, 0, 0, 0}

func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The inline form through the interposer: with "inline 1" in module.conf and
// inline_entry.ptx / inline_exit.ptx next to it, the driver gets the blocks
// pasted in every .entry (under the thread-0 guard the conf asks for), not
// the dispatch calls, and the status line says so. With one of the files
// missing, the interposer falls back to the calls.
func TestProbesInlineSplice(t *testing.T) {
	fb := writeTemp(t, "app.fatbin", fatbin(sassEntry(90), ptxEntry(t, "multi.ptx", 90)))
	steps := []string{"lib", fb, "launch", "3"}
	for _, tc := range []struct {
		name   string
		files  map[string]string // testdata/ptx file -> probes/ file
		inline bool
	}{
		{"inline", map[string]string{"inline_entry.ptx": "inline_entry.ptx", "inline_exit.ptx": "inline_exit.ptx"}, true},
		{"missing-exit", map[string]string{"inline_entry.ptx": "inline_entry.ptx"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn := probeTenant(t, 23, true)
			files := map[string]string{"inline_guard.conf": "module.conf"}
			for k, v := range tc.files {
				files[k] = v
			}
			for src, dst := range files {
				b, err := os.ReadFile(filepath.Join("testdata", "ptx", src))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(tn.dir, "probes", dst), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			r := tn.runImages(nil, steps...)
			wantLines(t, r.lines, "lib app.fatbin ok", "launch 3 ok")
			got := string(r.image(t, "image-0.ptx"))
			for i, e := range []string{"_Z4fillPii", "_Z5emptyv", "_Z4skipPi"} {
				b := entryBodies(got)[e]
				calls := strings.Contains(b, "call __gpuext_probe_entry") && strings.Contains(b, "call __gpuext_probe_exit")
				blocks := strings.Contains(b, fmt.Sprintf("$__gpuext_i%d_entry_done:", i)) && strings.Contains(b, fmt.Sprintf("$__gpuext_i%d_exit_done:", i))
				if blocks != tc.inline || calls == tc.inline || strings.Count(b, "bra $__gpuext_skip_") != 2 {
					t.Errorf("entry %s: inline blocks %v, dispatch calls %v, want inline=%v under the guard:\n%s", e, blocks, calls, tc.inline, b)
				}
			}
			st := r.status(t)
			want := "call"
			if tc.inline {
				want = "inline"
			}
			if len(st) != 1 || st[0]["state"] != "patched" || st[0]["splice"] != want || st[0]["guard"] != "thread0,thread0" {
				t.Errorf("status: %v, want splice=%s guard=thread0,thread0", st, want)
			}
		})
	}
}

// A fatbin (SASS + PTX) loaded through cuGetProcAddress'd cuLibraryLoadData:
// with probes on, the driver gets the image's PTX with the fragment and the
// probe calls in every .entry; the tenant id is set; the maps are copied out
// at exit with what the probes counted; the app sees no difference. Without a
// probes directory the driver gets the exact original image.
func TestProbesPatchFatbinImage(t *testing.T) {
	fb := writeTemp(t, "app.fatbin", fatbin(sassEntry(90), ptxEntry(t, "multi.ptx", 90)))
	steps := []string{"lib", fb, "launch", "3"}
	wantApp := []string{"lib app.fatbin ok", "launch 3 ok"}

	tn := probeTenant(t, 21, true)
	r := tn.runImages(nil, steps...)
	wantLines(t, r.lines, wantApp...)

	got := string(r.image(t, "image-0.ptx"))
	frag, _ := os.ReadFile(filepath.Join("testdata", "ptx", "fragment.ptx"))
	if !strings.Contains(got, string(bytes.TrimSpace(frag))) {
		t.Errorf("the driver's PTX lacks the fragment:\n%s", got)
	}
	bodies := entryBodies(got)
	for _, e := range []string{"_Z4fillPii", "_Z5emptyv", "_Z4skipPi"} {
		id := fmt.Sprintf("0x%016x", abi.KernelID(e))
		if b := bodies[e]; !strings.Contains(b, "call.uni __gpuext_probe_entry") || !strings.Contains(b, "call __gpuext_probe_exit") ||
			!strings.Contains(b, id) {
			t.Errorf("entry %s lacks the probe calls (id %s):\n%s", e, id, b)
		}
	}
	st := r.status(t)
	if len(st) != 1 || st[0]["image"] != "0" || st[0]["state"] != "patched" || st[0]["reason"] != "ok" ||
		st[0]["kernels"] != "3/3" || st[0]["api"] != "cuLibraryLoadData" || st[0]["kind"] != "wrapper" || st[0]["ptx_arch"] != "90" {
		t.Errorf("status: %v", st)
	}
	if _, err := fmt.Sscanf(st[0]["jit_ms"], "%f", new(float64)); err != nil {
		t.Errorf("jit_ms %q", st[0]["jit_ms"])
	}
	calls := tn.driverCalls(r.pid)
	if countPrefix(calls, "cuMemcpyHtoDAsync_v2 dst=__gpuext_tenant_id bytes=4 value=21 ") != 1 {
		t.Errorf("tenant id not set once: %q", calls)
	}
	m := readMaps(t, filepath.Join(r.probes, fmt.Sprintf("%d-0.maps", r.pid)))
	counts := m.maps["counts"]
	if m.pid != uint32(r.pid) || m.image != 0 || m.count != 1 || m.tenant != 21 || m.final != 1 || len(counts) != 80 {
		t.Fatalf("maps file: %+v", m)
	}
	if !bytes.Equal(counts[:32], countsDescriptor) || binary.LittleEndian.Uint64(counts[40:]) != 3 {
		t.Errorf("counts map % x: want the descriptor and 3 launches counted", counts)
	}
	// copy-out runs on the interposer's own non-blocking stream, never the legacy one
	for _, c := range calls {
		if strings.Contains(c, "cuMemcpyDtoHAsync_v2") && strings.Contains(c, "stream=(nil)") {
			t.Errorf("copy-out on the legacy stream: %s", c)
		}
	}
	if countPrefix(calls, "cuStreamCreate flags=1 ") != 1 {
		t.Errorf("no non-blocking stream: %q", calls)
	}

	off := probeTenant(t, 22, false)
	r = off.runImages(nil, steps...)
	wantLines(t, r.lines, wantApp...)
	orig, _ := os.ReadFile(fb)
	if got := r.image(t, "image-0.fatbin"); !bytes.Equal(got, orig) {
		t.Errorf("without probes the driver got %d bytes, not the original %d", len(got), len(orig))
	}
	if _, err := os.Stat(r.probes); err == nil {
		t.Errorf("probes off, yet %s exists", r.probes)
	}
	if strings.Contains(r.stderr, "probes") {
		t.Errorf("probes off, yet probe lines:\n%s", r.stderr)
	}
}

// Images without usable PTX load unmodified and the status says why.
func TestProbesUnpatchableImages(t *testing.T) {
	sass := writeTemp(t, "sass.fatbin", fatbin(sassEntry(90)))
	low := filepath.Join("testdata", "ptx", "sm52.ptx")
	lowText, _ := os.ReadFile(low)
	tn := probeTenant(t, 23, true)
	r := tn.runImages(nil, "lib", sass, "mod", low, "launch", "1")
	wantLines(t, r.lines, "lib sass.fatbin ok", "mod sm52.ptx ok", "launch 1 ok")
	orig, _ := os.ReadFile(sass)
	if got := r.image(t, "image-0.fatbin"); !bytes.Equal(got, orig) {
		t.Errorf("SASS-only fatbin changed on its way to the driver")
	}
	if got := r.image(t, "image-1.ptx"); !bytes.Equal(got, lowText) {
		t.Errorf("sm_52 module changed on its way to the driver:\n%s", got)
	}
	st := r.status(t)
	if len(st) != 2 || st[0]["state"] != "unpatched" || st[0]["reason"] != "sass-only" || st[0]["kind"] != "wrapper" ||
		st[1]["state"] != "unpatched" || st[1]["reason"] != "target-too-low:sm_52<sm_70" || st[1]["api"] != "cuModuleLoadData" {
		t.Errorf("status: %v", st)
	}
	if matches, _ := filepath.Glob(filepath.Join(r.probes, "*.maps")); len(matches) != 0 {
		t.Errorf("maps files for unpatched images: %v", matches)
	}
}

// A patched image the JIT rejects: the original loads, the app does not notice,
// the status and the log say why (with the JIT's error log).
func TestProbesJITFailureFallsBack(t *testing.T) {
	fb := writeTemp(t, "app.fatbin", fatbin(sassEntry(90), ptxEntry(t, "vecadd.ptx", 90)))
	tn := probeTenant(t, 24, true)
	r := tn.runImages([]string{"FAKECUDA_JIT_FAIL=1"}, "lib", fb, "launch", "1")
	wantLines(t, r.lines, "lib app.fatbin ok", "launch 1 ok")
	orig, _ := os.ReadFile(fb)
	if got := r.image(t, "image-0.fatbin"); !bytes.Equal(got, orig) {
		t.Errorf("after the JIT failure the driver did not get the original image")
	}
	st := r.status(t)
	if len(st) != 1 || st[0]["state"] != "unpatched" || st[0]["reason"] != "jit-failed:218" {
		t.Errorf("status: %v", st)
	}
	if !strings.Contains(r.stderr, "patched load failed (CUresult 218): ptxas fatal   : fake JIT failure; loading the original") {
		t.Errorf("no log line with the JIT error log:\n%s", r.stderr)
	}
}

// The PTX chosen is the newest the device can JIT; compressed PTX is
// unpacked (LZ4, zstd) when the system libraries are there.
func TestProbesFatbinPTXChoice(t *testing.T) {
	vec, _ := os.ReadFile(filepath.Join("testdata", "ptx", "vecadd.ptx"))
	newer := strings.Replace(string(vec), ".target sm_90", ".target sm_100", 1)
	fb := writeTemp(t, "two.fatbin", fatbin(ptxEntry(t, "version70.ptx", 70), ptxEntry(t, "vecadd.ptx", 90),
		fbEntry{kind: 1, arch: 100, payload: append([]byte(newer), 0)}))
	text := append(vec, 0)
	lz := writeTemp(t, "lz4.fatbin", fatbin(sassEntry(90), fbEntry{kind: 1, arch: 90, flags: 0x2000, payload: lz4Literals(text), usize: uint64(len(text))}))
	zs := writeTemp(t, "zstd.fatbin", fatbin(sassEntry(90), fbEntry{kind: 1, arch: 90, flags: 0x8000, payload: zstdRaw(text), usize: uint64(len(text))}))
	tn := probeTenant(t, 25, true)
	r := tn.runImages([]string{"FAKECUDA_CC=90"}, "lib", fb, "libraw", lz, "lib", zs)
	wantLines(t, r.lines, "lib two.fatbin ok", "libraw lz4.fatbin ok", "lib zstd.fatbin ok")
	if got := string(r.image(t, "image-0.ptx")); !strings.Contains(got, ".target sm_90\n") || !strings.Contains(got, "_Z6vecAddPKfS0_Pfi") {
		t.Errorf("not the compute_90 PTX:\n%.300s", got)
	}
	st := r.status(t)
	if st[0]["ptx_arch"] != "90" || st[0]["state"] != "patched" {
		t.Errorf("status: %v", st[0])
	}
	// before any context is current, device 0 decides
	r0 := tn.runImages([]string{"FAKECUDA_CC=90", "FAKECUDA_NO_CONTEXT=1"}, "lib", fb)
	if st0 := r0.status(t); st0[0]["ptx_arch"] != "90" || st0[0]["state"] != "patched" {
		t.Errorf("no context: %v", st0[0])
	}
	for i, lib := range []string{"liblz4.so.1", "libzstd.so.1"} {
		if st[i+1]["state"] == "patched" {
			if got := string(r.image(t, fmt.Sprintf("image-%d.ptx", i+1))); !strings.Contains(got, "call.uni __gpuext_probe_entry") {
				t.Errorf("%s: patched, but the driver got:\n%.300s", lib, got)
			}
			continue
		}
		if !strings.HasPrefix(st[i+1]["reason"], "compressed-ptx:") {
			t.Errorf("%s: %v", lib, st[i+1])
		}
		t.Logf("%s not loadable here: %v", lib, st[i+1])
	}
}

// Images loaded before any context is current are bound at the first launch
// in one; module loads (Ex with the caller's options) are patched too; the
// copy-out thread copies while the app runs.
func TestProbesDeferredBindAndPeriodicCopy(t *testing.T) {
	tn := probeTenant(t, 26, true)
	r := tn.runImages([]string{"FAKECUDA_NO_CONTEXT=1"}, "modex", filepath.Join("testdata", "ptx", "predret.ptx"), "ctx",
		"launch", "2", "sleep", "2300", "launch", "1")
	wantLines(t, r.lines, "modex predret.ptx ok", "ctx ok", "launch 2 ok", "sleep 2300", "launch 1 ok")
	calls := tn.driverCalls(r.pid)
	if countPrefix(calls, "cuModuleLoadDataEx image=") != 1 || countPrefix(calls, "options=3") != 1 {
		t.Errorf("patched module not loaded with the caller's option plus the error log: %q", calls)
	}
	// no context at load: the symbols are looked up at the first launch after one became current
	ctxAt, lookupAt := -1, -1
	for i, c := range calls {
		if strings.Contains(c, "cuCtxSetCurrent") && ctxAt < 0 {
			ctxAt = i
		}
		if strings.Contains(c, "cuModuleGetGlobal_v2 name=__gpuext_map_counts found") {
			lookupAt = i
		}
	}
	if countPrefix(calls, "cuModuleGetGlobal_v2 name=__gpuext_map_counts") != 1 || ctxAt < 0 || lookupAt < ctxAt {
		t.Errorf("symbols not looked up once, after a context became current: %q", calls)
	}
	m := readMaps(t, filepath.Join(r.probes, fmt.Sprintf("%d-0.maps", r.pid)))
	if got := m.launches(); got != 3 {
		t.Errorf("counted %d launches, want 3", got)
	}
	if m.seq < 3 || m.final != 1 {
		t.Errorf("maps copied %d times (want >= 2 periodic + 1 at exit), final=%d", m.seq, m.final)
	}
}

// launch_time 1: before each launch of a probed kernel the host's
// CLOCK_REALTIME goes into __gpuext_launch_ns of the kernel's module, on the
// launch's stream (so it is ordered before the kernel), for library and
// module images alike.
func TestProbesLaunchTime(t *testing.T) {
	fb := writeTemp(t, "app.fatbin", fatbin(sassEntry(90), ptxEntry(t, "vecadd.ptx", 90)))
	for _, tc := range []struct {
		name  string
		steps []string
	}{
		{"library", []string{"lib", fb, "launch", "2"}},
		{"module", []string{"mod", filepath.Join("testdata", "ptx", "vecadd.ptx"), "launch", "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn := probeTenant(t, 27, true)
			tn.launchTimeOn()
			before := uint64(time.Now().UnixNano())
			r := tn.runImages(nil, tc.steps...)
			after := uint64(time.Now().UnixNano())
			wantLines(t, r.lines, tc.steps[0]+" "+filepath.Base(tc.steps[1])+" ok", "launch 2 ok")
			calls := tn.driverCalls(r.pid)
			writes := 0
			for i, c := range calls {
				if !strings.Contains(c, "cuStreamWriteValue64_v2 dst=__gpuext_launch_ns") {
					continue
				}
				writes++
				var v uint64
				if _, err := fmt.Sscanf(c[strings.Index(c, "value="):], "value=%d", &v); err != nil || v < before || v > after {
					t.Errorf("launch time %d not within the run [%d, %d]: %s", v, before, after, c)
				}
				if !strings.HasSuffix(c, "stream=(nil)") || i+1 >= len(calls) || !strings.Contains(calls[i+1], "cuLaunchKernel f=0x5000") {
					t.Errorf("launch time not enqueued on the launch's stream right before the launch: %q", calls[i:min(i+2, len(calls))])
				}
			}
			if writes != 2 {
				t.Errorf("%d launch-time writes for 2 launches: %q", writes, calls)
			}
		})
	}
}

// ptxpatch_cli -i says what an image holds, the way the interposer sees it;
// on the real nvcc samples in testdata/fatbin (README there) every image with
// PTX must patch.
func TestPtxpatchCLIInspect(t *testing.T) {
	cli := filepath.Join(testutil.BuildDevrt(t), "ptxpatch_cli")
	fb := writeTemp(t, "x.fatbin", fatbin(sassEntry(90), ptxEntry(t, "vecadd.ptx", 80), ptxEntry(t, "multi.ptx", 90)))
	multi, _ := os.ReadFile(filepath.Join("testdata", "ptx", "multi.ptx"))
	out, err := exec.Command(cli, "-i", fb).CombinedOutput()
	if want := fmt.Sprintf("kind=fatbin ptx=2 ptx_compressed=0 elf=1 usable=1 arch=90 compressed=0 ptx_bytes=%d", len(multi)); err != nil || strings.TrimSpace(string(out)) != want {
		t.Errorf("-i: %v %s, want %s", err, out, want)
	}
	out, _ = exec.Command(cli, "-i", "-a", "86", fb).CombinedOutput()
	if !strings.Contains(string(out), "usable=1 arch=80") {
		t.Errorf("-i -a 86: %s", out)
	}
	sass := writeTemp(t, "s.fatbin", fatbin(sassEntry(90)))
	out, _ = exec.Command(cli, "-i", sass).CombinedOutput()
	if !strings.Contains(string(out), "usable=0 reason=sass-only") {
		t.Errorf("-i sass: %s", out)
	}
	// CUDA 13 layout: a helper container, then the unit's; the next unit's container is never read
	other := fatbin(ptxEntry(t, "vecadd.ptx", 90))
	unit := append(fatbin(helperEntry(90)), fatbin(sassEntry(90), ptxEntry(t, "multi.ptx", 90))...)
	out, _ = exec.Command(cli, "-i", writeTemp(t, "u.fatbin", append(unit, other...))).CombinedOutput()
	if want := fmt.Sprintf("usable=1 arch=90 compressed=0 ptx_bytes=%d", len(multi)); !strings.Contains(string(out), want) {
		t.Errorf("-i helper+unit: %s, want %s", out, want)
	}
	sassUnit := append(fatbin(helperEntry(90)), fatbin(sassEntry(90))...)
	out, _ = exec.Command(cli, "-i", writeTemp(t, "su.fatbin", append(sassUnit, other...))).CombinedOutput()
	if !strings.Contains(string(out), "usable=0 reason=sass-only") {
		t.Errorf("-i SASS-only unit followed by another unit with PTX: %s", out)
	}

	samples, _ := filepath.Glob(filepath.Join("testdata", "fatbin", "*.fatbin"))
	if len(samples) == 0 {
		t.Log("no nvcc samples in testdata/fatbin")
	}
	for _, s := range samples {
		out, err := exec.Command(cli, "-i", s).CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v %s", s, err, out)
			continue
		}
		t.Logf("%s: %s", s, strings.TrimSpace(string(out)))
		if !strings.Contains(string(out), "usable=1") {
			continue
		}
		got := patchFile(t, filepath.Join("testdata", "ptx", "fragment.conf"), filepath.Join("testdata", "ptx", "fragment.ptx"), s)
		if strings.HasPrefix(got, "unpatched") {
			t.Errorf("%s has PTX but did not patch: %s", s, got)
		} else if strings.Count(got, "call.uni __gpuext_probe_entry") != strings.Count(got, ".entry ") {
			t.Errorf("%s: not every .entry got the entry call", s)
		}
	}
}

// The lead's nvcc 13 images (testdata/fatbin) through the interposer: the
// zstd-compressed PTX of the -arch=sm_90 image is unpacked and patched in
// both kernels; the SASS-only image reaches the driver byte for byte.
func TestProbesRealNvccFatbin(t *testing.T) {
	sm90 := filepath.Join("testdata", "fatbin", "vecadd_sm90.fatbin")
	sass := filepath.Join("testdata", "fatbin", "vecadd_sass_only.fatbin")
	for _, f := range []string{sm90, sass} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("the committed nvcc sample %s is missing: %v", f, err)
		}
	}
	tn := probeTenant(t, 28, true)
	r := tn.runImages(nil, "lib", sm90, "lib", sass, "launch", "1")
	wantLines(t, r.lines, "lib vecadd_sm90.fatbin ok", "lib vecadd_sass_only.fatbin ok", "launch 1 ok")
	st := r.status(t)
	if len(st) != 2 {
		t.Fatalf("status: %v", st)
	}
	if st[0]["state"] != "patched" || st[0]["kernels"] != "2/2" || st[0]["ptx_arch"] != "90" || st[0]["target"] != "sm_90" {
		t.Errorf("sm_90 image: %v (zstd needs libzstd.so.1)", st[0])
	}
	if st[0]["state"] == "patched" {
		got := string(r.image(t, "image-0.ptx"))
		for _, e := range []string{"_Z4vaddPKfS0_Pfi", "_Z6vscalePffi"} {
			if b := entryBodies(got)[e]; !strings.Contains(b, "call.uni __gpuext_probe_entry") || !strings.Contains(b, "call __gpuext_probe_exit") {
				t.Errorf("%s not probed:\n%s", e, b)
			}
		}
	}
	if st[1]["state"] != "unpatched" || st[1]["reason"] != "sass-only" {
		t.Errorf("SASS-only image: %v", st[1])
	}
	orig, _ := os.ReadFile(sass)
	if got := r.image(t, "image-1.fatbin"); !bytes.Equal(got, orig) {
		t.Errorf("the SASS-only image changed on its way to the driver (%d bytes, want %d)", len(got), len(orig))
	}
}

// Containers of a pod share the tenant's probes directory but each has its
// own pid 1: two such processes, alive at once, keep separate status and
// maps files (a process that is gone has its files removed by the next
// one: probe_files_test.go). Needs root (unshare).
func TestProbesPidNamespacesKeepSeparateFiles(t *testing.T) {
	testutil.RequireRoot(t)
	fb := writeTemp(t, "app.fatbin", fatbin(sassEntry(90), ptxEntry(t, "vecadd.ptx", 90)))
	tn := probeTenant(t, 29, true)
	dir := filepath.Join(tn.acct, "probes")
	pidOne := func(steps ...string) *exec.Cmd {
		c := exec.Command("unshare", append([]string{"--pid", "--fork", "--kill-child", filepath.Join(tn.bin, "fake", "app_image"), "lib", fb}, steps...)...)
		c.Env = tn.env()
		return c
	}
	first := pidOne("launch", "1", "sleep", "2500") // still alive while the second runs
	var firstOut bytes.Buffer
	first.Stdout, first.Stderr = &firstOut, &firstOut
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "1.status")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first process wrote no 1.status")
		}
	}
	if out, err := pidOne("launch", "2").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("%v\n%s", err, firstOut.String())
	}
	for _, key := range []int{1, 1 + 1<<22} {
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("%d.status", key))); err != nil {
			t.Errorf("status of key %d: %v", key, err)
		}
	}
	launches := map[uint64]bool{}
	for _, key := range []int{1, 1 + 1<<22} {
		m := readMaps(t, filepath.Join(dir, fmt.Sprintf("%d-0.maps", key)))
		if m.pid != uint32(key) {
			t.Errorf("maps of key %d says pid %d", key, m.pid)
		}
		launches[m.launches()] = true
	}
	if !launches[1] || !launches[2] {
		t.Errorf("the two processes' counts were not kept apart: %v", launches)
	}
}

// The device's %globaltimer is not the host's CLOCK_REALTIME (on the H200 it
// ran behind by more than a launch takes). At bind the interposer measures
// the offset with its clock kernel and writes launch times in the device's
// clock; the status file says what it measured, and again at exit. Here
// the fake device's clock runs an hour behind (FAKECUDA_GLOBALTIMER_OFFSET_NS),
// and once it never starts its clock kernel at all.
func TestProbesLaunchTimeClockOffset(t *testing.T) {
	const skew = -3_600_000_000_000 // an hour: no unshifted launch time can pass for a shifted one
	fb := writeTemp(t, "app.fatbin", fatbin(sassEntry(90), ptxEntry(t, "vecadd.ptx", 90)))
	for _, tc := range []struct {
		name     string
		env      []string
		wantSkew int64 // what the written launch times are off the host's clock by
	}{
		{"synced", []string{fmt.Sprintf("FAKECUDA_GLOBALTIMER_OFFSET_NS=%d", skew)}, skew},
		{"clock kernel never runs", []string{fmt.Sprintf("FAKECUDA_GLOBALTIMER_OFFSET_NS=%d", skew), "FAKECUDA_CLOCK_NO_START=1"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn := probeTenant(t, 28, true)
			tn.launchTimeOn()
			before := time.Now().UnixNano()
			r := tn.runImages(tc.env, "lib", fb, "launch", "3")
			after := time.Now().UnixNano()
			wantLines(t, r.lines, "lib "+filepath.Base(fb)+" ok", "launch 3 ok")
			writes := 0
			for _, c := range tn.driverCalls(r.pid) {
				if !strings.Contains(c, "cuStreamWriteValue64_v2 dst=__gpuext_launch_ns") {
					continue
				}
				writes++
				var v int64
				if _, err := fmt.Sscanf(c[strings.Index(c, "value="):], "value=%d", &v); err != nil ||
					v < before+tc.wantSkew-1_000_000 || v > after+tc.wantSkew+1_000_000 {
					t.Errorf("launch time %d not within the run [%d, %d] shifted by %d: %s", v, before, after, tc.wantSkew, c)
				}
			}
			if writes != 3 {
				t.Errorf("%d launch-time writes for 3 launches", writes)
			}
			var clocks []map[string]string
			for _, kv := range r.status(t) {
				if kv["clock"] != "" {
					clocks = append(clocks, kv)
				}
			}
			raw, _ := os.ReadFile(filepath.Join(r.probes, fmt.Sprintf("%d.status", r.pid)))
			if tc.wantSkew == 0 {
				if len(clocks) != 1 || clocks[0]["clock"] != "unsynced" || clocks[0]["reason"] != "kernel-did-not-start" {
					t.Errorf("status clock lines %v, want one unsynced: kernel-did-not-start\n%s", clocks, raw)
				}
				return
			}
			if len(clocks) != 2 || clocks[0]["why"] != "bind" || clocks[1]["why"] != "exit" {
				t.Fatalf("status clock lines %v, want a sync at bind and one at exit\n%s", clocks, raw)
			}
			for _, c := range clocks {
				off, err1 := strconv.ParseInt(c["offset_ns"], 10, 64)
				errNs, err2 := strconv.ParseInt(c["error_ns"], 10, 64)
				// the true offset lies within offset +- error: the answer was stamped between h0 and h1
				// rounds N/32: a loaded machine may skip late rounds, never all
				if c["clock"] != "synced" || err1 != nil || err2 != nil || off < skew-errNs-1 || off > skew+errNs+1 ||
					!strings.HasSuffix(c["rounds"], "/32") || strings.HasPrefix(c["rounds"], "0/") {
					t.Errorf("clock line %v: offset not within its error of %d", c, skew)
				}
			}
		})
	}
}

// A CUDA graph capture in GLOBAL mode (PyTorch's) forbids "unsafe" calls -
// synchronisations, copies to pageable memory - from every thread, and one
// such call invalidates the capture. The interposer's copy thread, its
// binding at the first launch and its clock kernel make such calls; they
// run in RELAXED capture mode, so the application's capture survives them.
// A launch into a capturing stream gets no launch time (the graph would
// replay the capture's). The fake driver models the rule (fakecuda.c).
func TestProbesLetGraphCapturesBe(t *testing.T) {
	fb := writeTemp(t, "app.fatbin", fatbin(sassEntry(90), ptxEntry(t, "vecadd.ptx", 90)))
	for _, tc := range []struct {
		name  string
		env   []string
		steps []string
	}{
		// two copy-outs (one a second) while the capture runs
		{"copy thread during a capture", nil, []string{"lib", fb, "launch", "1", "capture", "2500", "launch", "1"}},
		// no context at load: the image binds (and syncs its clock) at the
		// first launch, the one into the capturing stream
		{"bind inside a capture", []string{"FAKECUDA_NO_CONTEXT=1"}, []string{"lib", fb, "ctx", "capture", "100", "launch", "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn := probeTenant(t, 29, true)
			tn.launchTimeOn()
			r := tn.runImages(tc.env, tc.steps...)
			var capLine string
			for _, l := range r.lines {
				if strings.HasPrefix(l, "capture ") {
					capLine = l
				}
			}
			if !strings.HasSuffix(capLine, " ok") {
				t.Errorf("the application's capture: %q, want ok\n%s", capLine, strings.Join(r.lines, "\n"))
			}
			calls := tn.driverCalls(r.pid)
			for _, c := range calls {
				if strings.Contains(c, "rc=900") {
					t.Errorf("refused during the capture: %s", c)
				}
			}
			m := readMaps(t, filepath.Join(r.probes, fmt.Sprintf("%d-0.maps", r.pid)))
			if m.final != 1 {
				t.Errorf("no final copy-out")
			}
			launches := countPrefix(calls, "cuLaunchKernel f=0x5000")
			if writes := countPrefix(calls, "cuStreamWriteValue64_v2 dst=__gpuext_launch_ns"); writes != launches-1 {
				t.Errorf("%d launch-time writes for %d launches, one of them captured: want %d", writes, launches, launches-1)
			}
		})
	}
}

// A clock kernel that never starts costs a bind up to 200 ms on the
// application's thread: once failed in a context, the context's next
// image takes the failure instead of waiting again (the copy thread
// retries every 30 s, off the launch path).
func TestProbesClockFailureNotRetriedAtBind(t *testing.T) {
	fb := writeTemp(t, "app.fatbin", fatbin(sassEntry(90), ptxEntry(t, "vecadd.ptx", 90)))
	tn := probeTenant(t, 28, true)
	tn.launchTimeOn()
	r := tn.runImages([]string{"FAKECUDA_CLOCK_NO_START=1"}, "lib", fb, "launch", "1", "lib", fb, "launch", "1")
	wantLines(t, r.lines, "lib "+filepath.Base(fb)+" ok", "launch 1 ok", "lib "+filepath.Base(fb)+" ok", "launch 1 ok")
	patched, unsynced := 0, 0
	for _, kv := range r.status(t) {
		if kv["state"] == "patched" {
			patched++
		}
		if kv["clock"] == "unsynced" {
			unsynced++
		}
	}
	if patched != 2 || unsynced != 1 {
		t.Errorf("%d images patched (want 2), %d clock measurements that waited for a kernel that never ran (want 1)", patched, unsynced)
	}
}

// A context that ends takes our stream and the maps with it: before it
// goes (cuCtxDestroy; the reset or last release of the primary context, as
// cudaDeviceReset does at the end of many applications) its images get a
// last, final copy of their maps and are unbound, and nothing of ours uses
// the context again. The fake driver aborts when an ended context is made
// current: on the H200 that was a process abort at exit.
func TestProbesContextThatEnds(t *testing.T) {
	fb := writeTemp(t, "app.fatbin", fatbin(sassEntry(90), ptxEntry(t, "vecadd.ptx", 90)))
	unbound := func(t *testing.T, r probeRun, ctxn, reason string) {
		t.Helper()
		n := 0
		for _, kv := range r.status(t) {
			if kv["state"] == "unbound" && kv["ctx"] == ctxn && kv["reason"] == reason {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d status lines 'ctx=%s state=unbound reason=%s', want 1", n, ctxn, reason)
		}
	}
	t.Run("destroy", func(t *testing.T) {
		tn := probeTenant(t, 30, true)
		r := tn.runImages(nil, "lib", fb, "launch", "2", "ctx2", "launch", "3", "ctx2destroy", "ctx", "launch", "1")
		wantLines(t, r.lines, "lib "+filepath.Base(fb)+" ok", "launch 2 ok", "ctx2 ok", "launch 3 ok", "ctx2destroy ok", "ctx ok", "launch 1 ok")
		first, second := r.contextMaps(t)
		if got := first.launches(); got != 3 {
			t.Errorf("first context counted %d launches, want 3", got)
		}
		if got := second.launches(); got != 3 {
			t.Errorf("the destroyed context counted %d launches, want its 3 (copied before it went)", got)
		}
		if second.final != 1 {
			t.Errorf("the destroyed context's copy is not final")
		}
		unbound(t, r, "1", "context-destroyed")
		calls := tn.driverCalls(r.pid)
		if n := countPrefix(calls, "cuStreamDestroy_v2"); n != 1 {
			t.Errorf("%d cuStreamDestroy_v2 calls, want 1 (our stream in the destroyed context)", n)
		}
		after := false
		for _, c := range calls {
			if strings.Contains(c, "cuCtxDestroy_v2") {
				after = true
			} else if after && strings.Contains(c, "cuCtxSetCurrent ctx=0x4100") {
				t.Errorf("the interposer made the destroyed context current: %s", c)
			}
		}
	})
	// cudart unloads its libraries in cudaDeviceReset and at exit: the maps
	// are the library's globals, so its last copy is taken before, in every
	// context it ran in, and no copy reads the freed globals afterwards
	t.Run("unload", func(t *testing.T) {
		tn := probeTenant(t, 30, true)
		r := tn.runImages(nil, "lib", fb, "launch", "2", "ctx2", "launch", "1", "ctx", "unload", "launch", "4")
		wantLines(t, r.lines, "lib "+filepath.Base(fb)+" ok", "launch 2 ok", "ctx2 ok", "launch 1 ok", "ctx ok", "unload ok", "launch 4 ok")
		for file, want := range map[string]uint64{"%d-0.maps": 2, "%d-0-1.maps": 1} {
			m := readMaps(t, filepath.Join(r.probes, fmt.Sprintf(file, r.pid)))
			if got := m.launches(); got != want || m.final != 1 {
				t.Errorf("%s: %d launches (want %d, the launches after the unload ran without the image), final %d (want 1)", file, got, want, m.final)
			}
		}
		unbound(t, r, "0", "unloaded")
		unbound(t, r, "1", "unloaded")
		if n := countPrefix(tn.driverCalls(r.pid), "unloaded"); n != 0 {
			t.Errorf("%d copies from the unloaded library's globals", n)
		}
	})
	// the primary context's last release, through the variant before _v2
	// (asked for as CUDA 7, as a runtime may): the fake's primary context
	// starts with one reference, so this release ends it
	t.Run("primary-release-v1", func(t *testing.T) {
		tn := probeTenant(t, 30, true)
		r := tn.runImages(nil, "lib", fb, "launch", "2", "release7")
		wantLines(t, r.lines, "lib "+filepath.Base(fb)+" ok", "launch 2 ok", "release7 ok")
		first := readMaps(t, filepath.Join(r.probes, fmt.Sprintf("%d-0.maps", r.pid)))
		if first.launches() != 2 || first.final != 1 {
			t.Errorf("after the release: %d launches (want 2), final %d (want 1)", first.launches(), first.final)
		}
		unbound(t, r, "0", "primary-context-ended")
	})
	t.Run("primary-reset", func(t *testing.T) {
		tn := probeTenant(t, 30, true)
		r := tn.runImages(nil, "lib", fb, "launch", "2", "reset")
		wantLines(t, r.lines, "lib "+filepath.Base(fb)+" ok", "launch 2 ok", "reset ok")
		m := readMaps(t, filepath.Join(r.probes, fmt.Sprintf("%d-0.maps", r.pid)))
		if got := m.launches(); got != 2 || m.final != 1 {
			t.Errorf("after the reset: %d launches (want 2), final %d (want 1)", got, m.final)
		}
		unbound(t, r, "0", "primary-context-ended")
		// the retain that found the primary context's handle was given back
		calls := tn.driverCalls(r.pid)
		if a, b := countPrefix(calls, "cuDevicePrimaryCtxRetain dev="), countPrefix(calls, "cuDevicePrimaryCtxRelease_v2 dev="); a != b {
			t.Errorf("%d retains, %d releases: the application's reference count changed", a, b)
		}
	})
}

// A library is loaded once and runs in every context its kernels are
// launched in, each with its own copy of the maps (a process on two GPUs,
// or two contexts on one). The first launch in a new context binds the
// image there: its own stream, map addresses and clock offset, its own
// maps file <pid>-<image>-<n>.maps. Every launch is counted once, in the
// context it ran in, and launch times go to that context's module.
func TestProbesEveryContextOfALibrary(t *testing.T) {
	fb := writeTemp(t, "app.fatbin", fatbin(sassEntry(90), ptxEntry(t, "vecadd.ptx", 90)))
	for _, launchTime := range []bool{true, false} {
		t.Run(fmt.Sprintf("launch_time=%v", launchTime), func(t *testing.T) {
			tn := probeTenant(t, 30, true)
			if launchTime {
				tn.launchTimeOn()
			}
			r := tn.runImages(nil, "lib", fb, "launch", "2", "ctx2", "launch", "3", "ctx", "launch", "1")
			wantLines(t, r.lines, "lib "+filepath.Base(fb)+" ok", "launch 2 ok", "ctx2 ok", "launch 3 ok", "ctx ok", "launch 1 ok")
			first, second := r.contextMaps(t)
			if got := first.launches(); got != 3 {
				t.Errorf("first context counted %d launches, want 3", got)
			}
			if got := second.launches(); got != 3 {
				t.Errorf("second context counted %d launches, want 3", got)
			}
			if first.final != 1 || second.final != 1 || second.image != 0 {
				t.Errorf("final copies: first %d, second %d (image %d)", first.final, second.final, second.image)
			}
			var bound, synced int
			for _, kv := range r.status(t) {
				if kv["state"] == "bound" && kv["ctx"] == "1" {
					bound++
				}
				if kv["clock"] == "synced" && kv["why"] == "bind" {
					synced++
				}
			}
			wantSynced, wantWrites := 0, 0
			if launchTime {
				wantSynced, wantWrites = 2, 6 // a clock offset per context; every launch
			}
			if bound != 1 || synced != wantSynced {
				t.Errorf("status: %d bind lines for the second context (want 1), %d clock syncs at bind (want %d)", bound, synced, wantSynced)
			}
			if n := countPrefix(tn.driverCalls(r.pid), "cuStreamWriteValue64_v2 dst=__gpuext_launch_ns"); n != wantWrites {
				t.Errorf("%d launch-time writes for 6 launches in two contexts, want %d", n, wantWrites)
			}
		})
	}
}
