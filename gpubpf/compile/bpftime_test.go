package compile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/devmap"
	"github.com/gpuext/gpuext/gpubpf/helpers"
	"github.com/gpuext/gpuext/gpubpf/internal/bpfc"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/gpubpf/ptx"
	"github.com/gpuext/gpuext/gpubpf/ptxinterp"
	"github.com/gpuext/gpuext/gpubpf/verifier"
)

// Programs of our own in bpftime's style (testdata/bpftime: kprobe/KERNEL
// sections, its helper numbers and GPU map types, built against the
// headers gpuext ships for them, gpubpf/programs/bpftime), compiled as a
// bundle, spliced into testdata/ptx/grid.ptx by the interposer's patcher
// and run in the PTX interpreter: 2 launches of 5 blocks x 80 threads.
const (
	btBlocks, btNtx, btNty = 5, 40, 2
	btThreads              = btBlocks * btNtx * btNty
	btLaunches             = 2
)

func bpftimeSpec(t *testing.T, src string) *ebpf.CollectionSpec {
	t.Helper()
	inc := bpfc.ABIIncludeDir(t)
	obj := bpfc.Compile(t, filepath.Join("testdata", "bpftime", src), filepath.Join(inc, "..", "..", "gpubpf", "programs", "bpftime"), filepath.Join(inc, "..", "..", "gpubpf", "programs"), inc)
	spec, err := ebpf.LoadCollectionSpec(obj)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// bpftimeBundle is the bundle of one object's device programs.
func bpftimeBundle(t *testing.T, name string, spec *ebpf.CollectionSpec, launchTime bool) *Bundle {
	t.Helper()
	var progs []string
	for pn, ps := range spec.Programs {
		if _, ok := abi.ParseSection(ps.SectionName); ok {
			progs = append(progs, pn)
		}
	}
	slices.Sort(progs)
	b, err := compileInputs([]probeInput{{Name: name, Object: name + ".o", Spec: spec, Programs: progs, LaunchTime: launchTime}}, mustLib(t))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustLib(t *testing.T) helpers.Library { t.Helper(); return helpers.Library{} }

// runGrid splices b into grid.ptx (as form: "call" or "inline") and runs
// btLaunches launches; it returns the machine (maps as the last launch
// left them).
func runGrid(t *testing.T, b *Bundle, form string, launchNs uint64) *ptxinterp.Machine {
	t.Helper()
	return runGridWith(t, b, form, func(m *ptxinterp.Machine) {
		if launchNs != 0 {
			binary.LittleEndian.PutUint64(m.Global(abi.SymLaunchNs), launchNs)
		}
	})
}

// runGridWith is runGrid with setup run on the loaded machine before the
// first launch (what the interposer writes at bind and launch).
func runGridWith(t *testing.T, b *Bundle, form string, setup func(m *ptxinterp.Machine)) *ptxinterp.Machine {
	t.Helper()
	cli := spliceCLI(t)
	dir := filepath.Join(t.TempDir(), "probes")
	if err := b.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	conf := b.Conf
	if form == "inline" {
		conf += b.Splice
	}
	cf := filepath.Join(dir, form+".conf")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, stderr bytes.Buffer
	cmd := exec.Command(cli, "-c", cf, filepath.Join(dir, abi.ModuleFile), filepath.Join("..", "..", "devrt", "testdata", "ptx", "grid.ptx"))
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("ptxpatch_cli: %v\n%s%s", err, out.String(), stderr.String())
	}
	m, err := ptxinterp.Load(out.String())
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	setup(m)
	res := m.Alloc(make([]byte, 4*btThreads))
	for l := 0; l < btLaunches; l++ {
		for bx := uint32(0); bx < btBlocks; bx++ {
			for ty := uint32(0); ty < btNty; ty++ {
				for tx := uint32(0); tx < btNtx; tx++ {
					lin := ty*btNtx + tx
					th := ptxinterp.ThreadRegs{
						Tid: [3]uint32{tx, ty, 0}, Ctaid: [3]uint32{bx, 0, 0},
						Ntid: [3]uint32{btNtx, btNty, 1}, Nctaid: [3]uint32{btBlocks, 1, 1},
						LaneID: lin % 32, WarpID: 4*bx + lin/32, SMID: bx % 2,
						Globaltimer: 1_000_000 + uint64(bx)*1000 + uint64(lin), GlobaltimerStep: 7,
					}
					if _, err := m.Call("_Z4gridPj", th, res); err != nil {
						t.Fatalf("launch %d block %d thread (%d,%d): %v", l, bx, tx, ty, err)
					}
				}
			}
		}
	}
	return m
}

func mapImage(t *testing.T, b *Bundle, m *ptxinterp.Machine, name string) *devmap.Image {
	t.Helper()
	for _, mi := range b.Manifest.Maps {
		if mi.Name == name {
			return &devmap.Image{Layout: mi.Layout, Bytes: bytes.Clone(m.Global(mi.Symbol))}
		}
	}
	t.Fatalf("bundle has no map %q", name)
	return nil
}

func u64s(t *testing.T, im *devmap.Image) []uint64 {
	t.Helper()
	ents, err := im.Entries()
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, e := range ents {
		out = append(out, binary.LittleEndian.Uint64(e.Value))
	}
	return out
}

var btForms = []string{"call", "inline"}

// threadhist's shape: a per-thread array counted with a plain += in every
// thread. Each thread's own row holds its launches; the rows sum to every
// thread of every launch; the manifest limits the module to the kernel its
// section names.
func TestBpftimeThreadHist(t *testing.T) {
	spec := bpftimeSpec(t, "thread_hist.bpf.c")
	b := bpftimeBundle(t, "thread-hist", spec, false)
	if got := strings.Join(b.Manifest.Kernels, ","); got != "_Z4gridPj" {
		t.Fatalf("kernels %q, want the section's _Z4gridPj", got)
	}
	if !strings.Contains(b.Conf, "kernel _Z4gridPj\n") {
		t.Fatalf("module.conf does not limit the probes to the kernel:\n%s", b.Conf)
	}
	for _, form := range btForms {
		m := runGrid(t, b, form, 0)
		im := mapImage(t, b, m, "th_count")
		if im.Layout.Type != abi.MapPerThread || im.Layout.NBuckets != abi.MapThreadSlots {
			t.Fatalf("%s: th_count layout %+v, want a per-thread map of %d rows", form, im.Layout, abi.MapThreadSlots)
		}
		if got := u64s(t, im); fmt.Sprint(got) != fmt.Sprint([]uint64{btThreads * btLaunches}) {
			t.Errorf("%s: th_count summed %v, want [%d]", form, got, btThreads*btLaunches)
		}
		d := im.Bytes[abi.MapHdrSize:]
		for g := 0; g < btThreads+2; g++ {
			want := uint64(btLaunches)
			if g >= btThreads {
				want = 0
			}
			if got := binary.LittleEndian.Uint64(d[8*g:]); got != want {
				t.Fatalf("%s: thread %d's row = %d, want %d", form, g, got, want)
			}
		}
		if im.NoRow() != 0 {
			t.Errorf("%s: %d accesses without a row", form, im.NoRow())
		}
	}
}

// kernelretsnoop's shape: one record per thread through
// bpf_perf_event_output on a GPU ring buffer, from every lane.
func TestBpftimeRetSnoop(t *testing.T) {
	spec := bpftimeSpec(t, "ret_snoop.bpf.c")
	b := bpftimeBundle(t, "ret-snoop", spec, false)
	for _, form := range btForms {
		m := runGrid(t, b, form, 0)
		im := mapImage(t, b, m, "rs_events")
		ents, err := im.Entries()
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != btThreads*btLaunches {
			t.Fatalf("%s: %d records, want %d (one per thread and launch)", form, len(ents), btThreads*btLaunches)
		}
		seen := map[[3]uint64]int{}
		for _, e := range ents {
			if len(e.Value) != 32 {
				t.Fatalf("%s: a %d-byte record, want 32", form, len(e.Value))
			}
			le := binary.LittleEndian
			seen[[3]uint64{le.Uint64(e.Value), le.Uint64(e.Value[8:]), le.Uint64(e.Value[16:])}]++
		}
		if len(seen) != btNtx*btNty {
			t.Errorf("%s: %d distinct thread indices, want %d", form, len(seen), btNtx*btNty)
		}
		for k, n := range seen {
			if n != btBlocks*btLaunches {
				t.Errorf("%s: thread %v: %d records, want %d", form, k, n, btBlocks*btLaunches)
			}
		}
	}
}

// launchlate's shape: every thread adds 1 to a histogram bin of a GPU
// array with a plain *count += 1 (one atomic add on the device); the bins
// sum to every thread; the dropped bpf_printk costs nothing.
//
// Its programs only add to the bins, so the bins get a copy per warp slot
// (ptx.StripeArrays: on one array every warp of a launch adds to the same
// address); the host sums the copies, and the catalog's spec is unchanged.
func TestBpftimeLaunchBins(t *testing.T) {
	spec := bpftimeSpec(t, "launch_bins.bpf.c")
	b := bpftimeBundle(t, "launch-bins", spec, true)
	if spec.Maps["lb_hist"].Type != ebpf.MapType(abi.BtMapGPUArray) {
		t.Errorf("the probe's own spec changed: lb_hist is %v", spec.Maps["lb_hist"].Type)
	}
	for _, mi := range b.Manifest.Maps {
		if mi.Name == "lb_hist" && mi.Layout.Type != abi.MapPerWarp {
			t.Errorf("lb_hist on the device: %s, want per-warp (only added to)", mi.Layout.Type)
		}
	}
	for _, form := range btForms {
		// launched 50 us before the first block's timer
		m := runGrid(t, b, form, 1_000_000-50_000)
		got := u64s(t, mapImage(t, b, m, "lb_hist"))
		// 50 us + up to ~5 us: bin 3 ([10 us, 100 us)) for every thread
		want := make([]uint64, 10)
		want[3] = btThreads * btLaunches
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: lb_hist %v, want %v", form, got, want)
		}
	}
}

// bpf_printk is dropped on the device, and so are the stores that build
// its format string on the stack, which every thread made before: the
// inline entry of launch_bins stores to its stack only the lookup's key
// (the bin), and its bins stay exact (TestBpftimeLaunchBins).
func TestBpftimePrintkFormatNotStored(t *testing.T) {
	b := bpftimeBundle(t, "launch-bins", bpftimeSpec(t, "launch_bins.bpf.c"), true)
	entry := b.Inline[abi.KernelEntry]
	var stores []string
	for _, l := range strings.Split(entry, "\n") {
		if strings.Contains(l, "st.local") && strings.Contains(l, "_stack") {
			stores = append(stores, strings.TrimSpace(l))
		}
	}
	if len(stores) != 1 || !strings.Contains(entry, "a stack store nothing reads: not emitted") {
		t.Errorf("stack stores in the inline entry: %q, want the bin's alone and the format string's left out\n%s", stores, entry)
	}
}

// kernelretsnoop's record, in the inline form, is written where the
// program runs: no helper call is given the stack (which would keep the
// record in local memory), and the record reserved with a compare-and-swap
// (its contents: TestBpftimeRetSnoop, its drops: TestBpftimeWarpCountsExact).
func TestBpftimeRingRecordInline(t *testing.T) {
	b := bpftimeBundle(t, "ret-snoop", bpftimeSpec(t, "ret_snoop.bpf.c"), false)
	exit := b.Inline[abi.KernelExit]
	if strings.Contains(exit, "\tcall ") || !strings.Contains(exit, "atom.cas.b64") {
		t.Errorf("the inline exit calls a helper or reserves no record:\n%s", exit)
	}
	for _, l := range strings.Split(exit, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "st.u64 [%__gxr") {
			t.Errorf("a store through a register the program set (a generic stack pointer): %s", l)
		}
	}
}

// Only an array that the programs only add to gets a copy per warp slot:
// one whose sum is read after the add, or whose old value a fetch returns
// and the program reads, keeps one copy (its bins would be a slot's), and
// so does a map the host writes (keep).
func TestBpftimeStripeOnlyAddedArrays(t *testing.T) {
	spec := bpftimeSpec(t, "add_only.bpf.c")
	b := bpftimeBundle(t, "add-only", spec, false)
	types := map[string]abi.MapType{}
	for _, mi := range b.Manifest.Maps {
		types[mi.Name] = mi.Layout.Type
	}
	want := map[string]abi.MapType{"ao_added": abi.MapPerWarp, "ao_read": abi.MapArray, "ao_fetched": abi.MapArray, "ao_flag": abi.MapPerWarp}
	if fmt.Sprint(types) != fmt.Sprint(want) {
		t.Errorf("device maps %v, want %v", types, want)
	}
	for _, form := range btForms {
		m := runGrid(t, b, form, 0)
		for name, n := range map[string]uint64{"ao_added": btThreads * btLaunches, "ao_read": btThreads * btLaunches, "ao_fetched": btThreads * btLaunches} {
			if got := u64s(t, mapImage(t, b, m, name)); fmt.Sprint(got) != fmt.Sprint([]uint64{0, n, 0, 0}) {
				t.Errorf("%s: %s %v, want [0 %d 0 0]", form, name, got, n)
			}
		}
	}
	// the same object, a host that writes ao_added: it stays an array
	merged := &ebpf.CollectionSpec{Maps: map[string]*ebpf.MapSpec{}, Programs: spec.Programs}
	for n, ms := range spec.Maps {
		merged.Maps[n] = ms
	}
	var fused map[string][]int
	if rep, err := verify("add-only", "add_only.bpf.o", spec); err != nil {
		t.Fatal(err)
	} else {
		fused = map[string][]int{}
		for _, r := range rep.Programs {
			fused[r.Prog] = r.FusedAdds
		}
	}
	// no fused add known: only the map added to by atomics alone is striped
	plain := &ebpf.CollectionSpec{Maps: map[string]*ebpf.MapSpec{}, Programs: spec.Programs}
	for n, ms := range spec.Maps {
		plain.Maps[n] = ms
	}
	if got := ptx.StripeArrays(plain, []string{"ao_entry"}, nil, nil); fmt.Sprint(got) != "[ao_flag]" {
		t.Errorf("without fused adds: striped %v, want [ao_flag] (its adds are atomics)", got)
	}
	got := ptx.StripeArrays(merged, []string{"ao_entry"}, fused, func(n string) bool { return n == "ao_added" })
	if fmt.Sprint(got) != "[ao_flag]" || merged.Maps["ao_added"].Type != spec.Maps["ao_added"].Type {
		t.Errorf("with ao_added written by the host: striped %v, ao_added %v", got, merged.Maps["ao_added"].Type)
	}
}

// cuda-counter's shape: per-block start times (last writer wins) in a
// hash, an atomic count of every thread, and a plain += of every thread's
// time since its block's start (one atomic add).
func TestBpftimeCallCounter(t *testing.T) {
	spec := bpftimeSpec(t, "call_counter.bpf.c")
	b := bpftimeBundle(t, "call-counter", spec, false)
	for _, form := range btForms {
		m := runGrid(t, b, form, 0)
		tot := u64s(t, mapImage(t, b, m, "cc_totals"))
		if tot[0] != btThreads*btLaunches {
			t.Errorf("%s: count %d, want %d", form, tot[0], btThreads*btLaunches)
		}
		if tot[1] == 0 {
			t.Errorf("%s: no time added", form)
		}
		starts, err := mapImage(t, b, m, "cc_start").Entries()
		if err != nil {
			t.Fatal(err)
		}
		if len(starts) != btBlocks {
			t.Errorf("%s: %d block start times, want %d", form, len(starts), btBlocks)
		}
	}
}

// What stays refused: a read-modify-write through map_update_elem by every
// thread, and (gpuext's flavour) an array entry whose key threads of
// different blocks share; accepted: a key injective in the thread's id in
// the launch. Each refusal names the program, the instruction and line,
// the map, and what races.
func TestBpftimeRaces(t *testing.T) {
	_, err := verifier.VerifyCollection(bpftimeSpec(t, "racy_update.bpf.c"))
	var ve *verifier.Error
	if !errors.As(err, &ve) || !errors.Is(err, verifier.ErrDivergent) {
		t.Fatalf("racy_update: %v, want a divergence rejection", err)
	}
	for _, want := range []string{"ru_exit", "racy_update.bpf.c:", `"ru_count"`, "read-modify-write race", "every lane of every block"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("racy_update: %q does not say %q", err, want)
		}
	}
	res, errs, err := verifier.VerifyEach(bpftimeSpec(t, "own_slot.bpf.c"))
	if err != nil {
		t.Fatal(err)
	}
	if res["os_own"] == nil {
		t.Errorf("os_own (key 2*global_thread_id+1) refused: %v", errs["os_own"])
	}
	e := errs["os_shared"]
	if e == nil || !errors.Is(e, verifier.ErrDivergent) {
		t.Fatalf("os_shared (key thread_idx(0)): %v, want refused", e)
	}
	for _, want := range []string{"os_shared", "own_slot.bpf.c:", `"os_slots"`, "gpuext_global_thread_id"} {
		if !strings.Contains(e.Error(), want) {
			t.Errorf("os_shared: %q does not say %q", e, want)
		}
	}
}

// An object with no program at a device attach point is an error naming
// the file, not a module with nothing in it.
func TestNoDeviceProgramNamesTheFile(t *testing.T) {
	spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{
		"host": {Name: "host", SectionName: "uprobe/libcuda.so:cuLaunchKernel"},
	}, Maps: map[string]*ebpf.MapSpec{}}
	_, err := compileInputs([]probeInput{{Name: "empty", Object: "empty.o", Spec: spec}}, mustLib(t))
	if !errors.Is(err, verifier.ErrNoPrograms) {
		t.Fatalf("err = %v, want ErrNoPrograms", err)
	}
	for _, want := range []string{"empty.o", `host in "uprobe/libcuda.so:cuLaunchKernel"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %q", err, want)
		}
	}
}

// An unchanged bpftime object names a kernel of the app it was written for
// (_Z5otherPj here); its descriptor's "retarget" runs it in the kernels the
// descriptor names, or in every kernel. Without retarget it stays in its
// own kernel, so grid.ptx is not patched; retargeted to every kernel, and
// to _Z4gridPj by name, every thread's row is exact in both splice forms.
func TestBpftimeRetarget(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("testdata", "bpftime", "thread_hist.bpf.c"))
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "thread_hist.bpf.c")
	if err := os.WriteFile(src, bytes.ReplaceAll(text, []byte("_Z4gridPj"), []byte("_Z5otherPj")), 0o644); err != nil {
		t.Fatal(err)
	}
	inc := bpfc.ABIIncludeDir(t)
	obj, err := os.ReadFile(bpfc.Compile(t, src, filepath.Join(inc, "..", "..", "gpubpf", "programs", "bpftime"), filepath.Join(inc, "..", "..", "gpubpf", "programs"), inc))
	if err != nil {
		t.Fatal(err)
	}
	bundle := func(extra string) *Bundle {
		t.Helper()
		dir := t.TempDir()
		desc := `{"name": "thread-hist", "description": "threadhist for another app", "programs": ["th_exit"],` + extra +
			` "views": [{"map": "th_count", "kind": "per-thread", "fields": ["exits"]}]}`
		if err := os.WriteFile(filepath.Join(dir, "thread-hist.json"), []byte(desc), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "thread-hist.bpf.o"), obj, 0o644); err != nil {
			t.Fatal(err)
		}
		cat, err := programs.BuiltinWithDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		b, err := NewCompiler(cat, externHelpers).Compile([]string{"thread-hist"})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	total := func(b *Bundle, form string) uint64 {
		t.Helper()
		im := mapImage(t, b, runGrid(t, b, form, 0), "th_count")
		d := im.Bytes[abi.MapHdrSize:]
		var sum uint64
		for g := 0; g < btThreads; g++ {
			row := binary.LittleEndian.Uint64(d[8*g:])
			if row != 0 && row != btLaunches {
				t.Fatalf("%s: thread %d's row = %d", form, g, row)
			}
			sum += row
		}
		return sum
	}

	own := bundle("")
	if got := strings.Join(own.Manifest.Kernels, ","); got != "_Z5otherPj" || !strings.Contains(own.Conf, "kernel _Z5otherPj\n") {
		t.Fatalf("without retarget: kernels %q, want the section's _Z5otherPj\n%s", got, own.Conf)
	}
	for _, c := range []struct {
		name, extra, kernels string
		want                 uint64
	}{
		{"every kernel", ` "retarget": true,`, "", btThreads * btLaunches},
		{"named kernel", ` "retarget": true, "kernels": ["_Z4gridPj"],`, "_Z4gridPj", btThreads * btLaunches},
	} {
		b := bundle(c.extra)
		if got := strings.Join(b.Manifest.Kernels, ","); got != c.kernels {
			t.Errorf("%s: kernels %q, want %q", c.name, got, c.kernels)
		}
		for _, form := range btForms {
			if got := total(b, form); got != c.want {
				t.Errorf("%s, %s: rows sum to %d, want %d", c.name, form, got, c.want)
			}
		}
	}
}

// Where every lane of a bpftime program adds to one counter, the device
// adds once a warp and address (ptx warpAdd): a per-thread map's accesses
// past its last row, and the records a full ring drops. The counts stay
// those of one add per lane: with 100 rows for 400 threads, 300 threads a
// launch have no row; a ring of 256 records keeps 256 of the 800 and
// counts the others dropped. (The interpreter runs each thread alone in its warp;
// that one add covers a whole warp's lanes is for make gpu-test.)
func TestBpftimeWarpCountsExact(t *testing.T) {
	spec := bpftimeSpec(t, "thread_hist.bpf.c")
	spec.Maps["th_count"].MapExtra = 100
	b := bpftimeBundle(t, "thread-hist", spec, false)
	// activemask is PTX 6.2: an app's older PTX is left unpatched
	if b.Manifest.MinPTX != "6.2" || !strings.Contains(b.Conf, "min_ptx 6.2\n") {
		t.Errorf("min PTX %q, want 6.2 (activemask)\n%s", b.Manifest.MinPTX, b.Conf)
	}
	for _, form := range btForms {
		im := mapImage(t, b, runGrid(t, b, form, 0), "th_count")
		if got, want := im.NoRow(), uint64((btThreads-100)*btLaunches); got != want {
			t.Errorf("%s: %d accesses past the last row, want %d", form, got, want)
		}
		if got := u64s(t, im); fmt.Sprint(got) != fmt.Sprint([]uint64{100 * btLaunches}) {
			t.Errorf("%s: rows sum to %v, want [%d]", form, got, 100*btLaunches)
		}
		// the warps add to their SM's stripe (runGrid puts blocks on SMs
		// 0 and 1 in turn): both stripes counted, no other
		l := im.Layout
		base := abi.MapHdrSize + uint64(l.NBuckets)*uint64(l.MaxEntries)*uint64(l.Stride)
		var stripes []uint64
		for i := uint64(0); i < abi.MapNoRowStripes; i++ {
			if v := binary.LittleEndian.Uint64(im.Bytes[base+i*abi.MapNoRowStripe:]); v != 0 {
				stripes = append(stripes, i)
			}
		}
		if fmt.Sprint(stripes) != "[0 1]" {
			t.Errorf("%s: counts past the rows in stripes %v, want [0 1] (the SMs of the launch)", form, stripes)
		}
	}

	spec = bpftimeSpec(t, "ret_snoop.bpf.c")
	// one record a thread of bpftime's ring: abi.BtRingbufThreads records
	spec.Maps["rs_events"].MaxEntries = 1
	keep := abi.BtRingbufThreads
	b = bpftimeBundle(t, "ret-snoop", spec, false)
	for _, form := range btForms {
		im := mapImage(t, b, runGrid(t, b, form, 0), "rs_events")
		ents, err := im.Entries()
		if err != nil {
			t.Fatal(err)
		}
		dropped := abi.RingDropped(im.Layout, im.Bytes[abi.MapHdrSize:])
		if len(ents) != keep || dropped != uint64(btThreads*btLaunches-keep) {
			t.Errorf("%s: %d records kept, %d dropped; want %d and %d", form, len(ents), dropped, keep, btThreads*btLaunches-keep)
		}
		// the drops seen inline went to the stripes of the SMs (0 and 1),
		// none to the helper's word: every call after the ring filled
		base := abi.MapHdrSize + abi.RingStripesOffset(im.Layout.MaxEntries)
		var stripes []uint64
		for i := uint64(0); i < abi.MapNoRowStripes; i++ {
			if v := binary.LittleEndian.Uint64(im.Bytes[base+i*abi.MapNoRowStripe:]); v != 0 {
				stripes = append(stripes, i)
			}
		}
		if w := binary.LittleEndian.Uint64(im.Bytes[abi.MapHdrSize+8:]); fmt.Sprint(stripes) != "[0 1]" || w != 0 {
			t.Errorf("%s: drops in stripes %v and %d in the helper's count, want stripes [0 1] and 0", form, stripes, w)
		}
	}
}

// A per-thread map written with bpf_map_update_elem: a thread with a row
// gets 0 and its value, one without -E2BIG and a count past the rows (once
// a lane), and bad flags -EINVAL before anything, uncounted.
func TestBpftimePerThreadUpdate(t *testing.T) {
	spec := bpftimeSpec(t, "thread_upd.bpf.c")
	spec.Maps["tu_rows"].MapExtra = 100
	b := bpftimeBundle(t, "thread-upd", spec, false)
	for _, form := range btForms {
		m := runGrid(t, b, form, 0)
		rows := mapImage(t, b, m, "tu_rows")
		if got, want := rows.NoRow(), uint64((btThreads-100)*btLaunches); got != want {
			t.Errorf("%s: %d updates past the last row counted, want %d", form, got, want)
		}
		d := rows.Bytes[abi.MapHdrSize:]
		for g := 0; g < 100; g++ {
			if v := binary.LittleEndian.Uint64(d[8*g:]); v != 7 {
				t.Fatalf("%s: row %d = %d, want 7", form, g, v)
			}
		}
		if got, want := fmt.Sprint(u64s(t, mapImage(t, b, m, "tu_refused"))), fmt.Sprint([]uint64{(btThreads - 100) * btLaunches, btThreads * btLaunches}); got != want {
			t.Errorf("%s: refusals (-E2BIG, -EINVAL) %s, want %s", form, got, want)
		}
	}
}
