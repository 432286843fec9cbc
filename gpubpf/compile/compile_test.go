package compile

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"unsafe"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/helpers"
	"github.com/gpuext/gpuext/gpubpf/internal/bpfc"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/gpubpf/verifier"
	"github.com/gpuext/gpuext/lib/testutil"
)

// externHelpers makes modules that only declare the helper library, as the
// interpreter wants them (it implements the helpers natively).
func externHelpers() (helpers.Library, error) { return helpers.Library{}, nil }

func testCompiler() *Compiler { return NewCompiler(programs.Builtin(), externHelpers) }

func TestCompileMergesProbes(t *testing.T) {
	c := testCompiler()
	b, err := c.Compile([]string{"sm-histogram", "launch-stats"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(b.Manifest.Probes, ","); got != "launch-stats,sm-histogram" {
		t.Errorf("probes = %s", got)
	}
	var maps, progs []string
	for _, m := range b.Manifest.Maps {
		maps = append(maps, m.Name)
	}
	for _, p := range b.Manifest.Programs {
		progs = append(progs, p.Name+"@"+p.Attach)
	}
	if got := strings.Join(maps, ","); got != "ls_counters,smh_counts" {
		t.Errorf("maps = %s", got)
	}
	if got := strings.Join(progs, ","); got != "launch_stats_entry@kernel_entry,launch_stats_exit@kernel_exit,sm_histogram_entry@kernel_entry" {
		t.Errorf("programs = %s", got)
	}
	for _, fn := range []string{abi.FuncEntry, abi.FuncExit, "__gpuext_map_smh_counts", "__gpuext_prog_launch_stats_exit"} {
		if !strings.Contains(b.PTX, fn) {
			t.Errorf("module.ptx has no %s", fn)
		}
	}
	if strings.Contains(b.PTX, ".version") || strings.Contains(b.PTX, ".target") {
		t.Error("module.ptx is a fragment: no .version/.target")
	}
	// ls_counters: per-warp, 16384 slots x 4 x 8 + 32.
	wantConf := "version 1\nmin_ptx 6.0\nmin_target 70\nlaunch_time 0\n" +
		"map ls_counters __gpuext_map_ls_counters 524320\n" +
		"map smh_counts __gpuext_map_smh_counts 4128\n"
	if b.Conf != wantConf {
		t.Errorf("module.conf =\n%s\nwant\n%s", b.Conf, wantConf)
	}
	var m abi.Manifest
	if err := json.Unmarshal(b.ManifestJSON(), &m); err != nil || m.Version != abi.ManifestVersion {
		t.Errorf("manifest.json: %v %+v", err, m)
	}
}

func TestCompileLaunchTimeAndCache(t *testing.T) {
	c := testCompiler()
	b1, err := c.Compile([]string{"launch-latency", "launch-stats"})
	if err != nil {
		t.Fatal(err)
	}
	if !b1.Manifest.LaunchTime || !strings.Contains(b1.Conf, "launch_time 1\n") {
		t.Errorf("launch-latency needs the launch time: %q", b1.Conf)
	}
	b2, _ := c.Compile([]string{"launch-stats", "launch-latency", "launch-stats"})
	if b1 != b2 {
		t.Error("the same probe set compiled twice")
	}
}

func TestCompileErrors(t *testing.T) {
	c := testCompiler()
	if _, err := c.Compile(nil); !errors.Is(err, ErrNoProbes) {
		t.Errorf("empty set: %v", err)
	}
	_, err := c.Compile([]string{"launch-stats", "kernel-timer"})
	if !errors.Is(err, programs.ErrUnknownProbe) || !strings.Contains(err.Error(), `"kernel-timer"`) {
		t.Errorf("unknown probe: %v", err)
	}
	broken := NewCompiler(programs.Builtin(), func() (helpers.Library, error) { return helpers.Library{}, helpers.ErrNotBuilt })
	if _, err := broken.Compile([]string{"launch-stats"}); !errors.Is(err, helpers.ErrNotBuilt) {
		t.Errorf("no helper library: %v", err)
	}
}

func readProbeFile(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriteDirSwapsWholeBundles(t *testing.T) {
	c := testCompiler()
	a, _ := c.Compile([]string{"launch-stats"})
	b, _ := c.Compile([]string{"sm-histogram"})
	tenant := t.TempDir()
	dir := filepath.Join(tenant, "probes")
	// An older layout: a plain directory.
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "module.conf"), []byte("stale"), 0o644)

	if err := a.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	if got := readProbeFile(t, dir, ConfFile); got != a.Conf+a.Splice {
		t.Fatalf("module.conf = %q", got)
	}
	if got := readProbeFile(t, dir, abi.ModuleFile); got != a.PTX {
		t.Fatal("module.ptx differs")
	}
	if err := a.WriteDir(dir); err != nil { // unchanged: nothing to do
		t.Fatal(err)
	}
	if err := b.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	if got := readProbeFile(t, dir, ConfFile); got != b.Conf+b.Splice {
		t.Fatalf("after the swap module.conf = %q", got)
	}
	var m abi.Manifest
	json.Unmarshal([]byte(readProbeFile(t, dir, abi.ManifestFile)), &m)
	if strings.Join(m.Probes, ",") != "sm-histogram" {
		t.Errorf("manifest probes %v", m.Probes)
	}
	// a third bundle: the oldest version goes, the previous stays.
	l, _ := c.Compile([]string{"launch-latency"})
	if err := l.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	vers, _ := filepath.Glob(filepath.Join(tenant, ".probes-*"))
	if len(vers) != 2 {
		t.Errorf("versions kept: %v, want the current and the previous", vers)
	}
	if err := RemoveDir(dir); err != nil {
		t.Fatal(err)
	}
	left, _ := os.ReadDir(tenant)
	if len(left) != 0 {
		t.Errorf("RemoveDir left %v", left)
	}
}

func TestDefaultCompileUsesEmbeddedHelpers(t *testing.T) {
	b, err := Compile([]string{"launch-stats"})
	if errors.Is(err, helpers.ErrNotBuilt) {
		testutil.SkipOrFail(t, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range helpers.Functions {
		if !strings.Contains(b.PTX, ".visible .func") || !strings.Contains(b.PTX, fn+"(") {
			t.Errorf("module.ptx does not define %s", fn)
		}
	}
	if strings.Contains(b.PTX, ".extern .func") {
		t.Error("module.ptx declares helpers it should define")
	}
}

// Every built-in probe passes the device verifier (Compile runs it before
// translating).
func TestBuiltinProbesVerify(t *testing.T) {
	cat := programs.Builtin()
	for _, name := range cat.Names() {
		spec, err := cat.Spec(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := verify(name, "", spec); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestVerifierRejectionNamesProbeAndLine(t *testing.T) {
	obj := bpfc.Compile(t, "testdata/every_thread.bpf.c", bpfc.ABIIncludeDir(t), "../programs")
	elf, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	entry := `{"name": "every-thread", "description": "counts in every thread", "object": "every_thread.o",
		"programs": ["every_thread_entry"], "views": [{"map": "et_counts", "kind": "counters", "fields": ["n"]}]}`
	cat, err := programs.Load(fstest.MapFS{
		"catalog/every-thread.json": {Data: []byte(entry)},
		"every_thread.o":            {Data: elf},
	}, "catalog", ".")
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewCompiler(cat, externHelpers).Compile([]string{"every-thread"})
	var verr *verifier.Error
	if !errors.As(err, &verr) {
		t.Fatalf("err = %v, want a *verifier.Error", err)
	}
	for _, want := range []string{`probe "every-thread"`, "every_thread_entry", "every_thread.bpf.c:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err %q does not name %q", err, want)
		}
	}
	t.Log(err)
}

// The site guard: every catalog probe starts with "thread_linear_id() != 0:
// return" (launch-latency has no exit program: nothing to run there). The
// shapes LeaderOnly refuses are in gpubpf/ptx's TestLeaderOnly.
// module.conf is Conf + Splice.
func TestCompileSiteGuard(t *testing.T) {
	c := testCompiler()
	for set, want := range map[string]string{
		"launch-stats": "inline 1\nguard_entry thread0\nguard_exit thread0\n",
		"launch-latency,launch-stats,sm-histogram": "inline 1\nguard_entry thread0\nguard_exit thread0\n",
	} {
		b, err := c.Compile(strings.Split(set, ","))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(b.Splice, want) {
			t.Errorf("%s: splice directives\n%s\nwant them to start with\n%s", set, b.Splice, want)
		}
		if got := string(b.Files()[ConfFile]); got != b.Conf+b.Splice {
			t.Errorf("%s: module.conf is not Conf + Splice:\n%s", set, got)
		}
	}
}

// A container's kernel list (probe-kernels.gpuext.io) becomes the bundle's
// kernel lines; with catalog kernels it narrows them (intersection). The
// set is compiled once, whatever the kernel lists.
func TestCompileKernels(t *testing.T) {
	c := testCompiler()
	b, err := c.CompileKernels([]string{"launch-stats"}, []string{"_Z4vaddPKfS0_Pfi", "_Z3sumPf", "_Z4vaddPKfS0_Pfi"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.Conf, "launch_time 0\nkernel _Z3sumPf\nkernel _Z4vaddPKfS0_Pfi\nmap ") {
		t.Errorf("module.conf lacks the kernel lines:\n%s", b.Conf)
	}
	if got := string(b.Files()[ConfFile]); got != b.Conf+b.Splice {
		t.Errorf("module.conf is not Conf + Splice:\n%s", got)
	}
	var m abi.Manifest
	if err := json.Unmarshal(b.ManifestJSON(), &m); err != nil || strings.Join(m.Kernels, ",") != "_Z3sumPf,_Z4vaddPKfS0_Pfi" {
		t.Errorf("manifest.json kernels: %v %v", err, m.Kernels)
	}
	// the same set and kernels in another order: the same module.conf, on
	// the set's one compiled module (only the set is cached; a kernel list
	// is a copy and a module.conf)
	if b2, _ := c.CompileKernels([]string{"launch-stats"}, []string{"_Z3sumPf", "_Z4vaddPKfS0_Pfi"}); b2 == nil || b2.Conf != b.Conf ||
		unsafe.StringData(b2.PTX) != unsafe.StringData(b.PTX) {
		t.Error("the same set and kernels: another module.conf, or the set compiled again")
	}
	plain, err := c.Compile([]string{"launch-stats"})
	if err != nil {
		t.Fatal(err)
	}
	if len(plain.Manifest.Kernels) != 0 || strings.Contains(plain.Conf, "kernel ") {
		t.Errorf("the cached bundle of the set changed:\n%s", plain.Conf)
	}
	if b3, _ := c.CompileKernels([]string{"launch-stats"}, nil); b3 != plain {
		t.Error("no kernels is not the set's bundle")
	}
	other, _ := c.CompileKernels([]string{"launch-stats"}, []string{"_Z3sumPf"})
	if other == b || !strings.Contains(other.Conf, "kernel _Z3sumPf\nmap ") {
		t.Errorf("another kernel list shares the bundle:\n%s", other.Conf)
	}

	// A catalog entry that names kernels: the container's list narrows it.
	obj, err := os.ReadFile("../programs/launchstats_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	entry := `{"name": "vadd-stats", "description": "launch-stats of two kernels", "object": "launchstats_bpfel.o",
		"programs": ["launch_stats_entry", "launch_stats_exit"], "kernels": ["_Z4vaddPKfS0_Pfi", "_Z4vsubPKfS0_Pfi"],
		"views": [{"map": "ls_counters", "kind": "counters", "fields": ["launches", "blocks", "blockNs", "blockExits"]}]}`
	cat, err := programs.Load(fstest.MapFS{"catalog/vadd-stats.json": {Data: []byte(entry)}, "launchstats_bpfel.o": {Data: obj}}, "catalog", ".")
	if err != nil {
		t.Fatal(err)
	}
	cc := NewCompiler(cat, externHelpers)
	b, err = cc.CompileKernels([]string{"vadd-stats"}, []string{"_Z3sumPf", "_Z4vaddPKfS0_Pfi"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(b.Conf, "kernel ") != 1 || !strings.Contains(b.Conf, "kernel _Z4vaddPKfS0_Pfi\n") {
		t.Errorf("intersection: module.conf\n%s", b.Conf)
	}
	_, err = cc.CompileKernels([]string{"vadd-stats"}, []string{"_Z3sumPf"})
	if !errors.Is(err, ErrNoKernelLeft) || !strings.Contains(err.Error(), "_Z4vaddPKfS0_Pfi,_Z4vsubPKfS0_Pfi") || !strings.Contains(err.Error(), "_Z3sumPf") {
		t.Errorf("no kernel in common: %v", err)
	}
	if b, err := cc.Compile([]string{"vadd-stats"}); err != nil || strings.Count(b.Conf, "kernel ") != 2 {
		t.Errorf("catalog kernels alone: %v\n%v", err, b)
	}
}
