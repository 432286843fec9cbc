package maps

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/compile"
	"github.com/gpuext/gpuext/gpubpf/devmap"
	"github.com/gpuext/gpuext/gpubpf/helpers"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/gpubpf/ptxinterp"
	"github.com/gpuext/gpuext/lib/testutil"
)

// sdkProbeDir builds the example probes of examples/probes the way an
// operator would: `make sdk` into a directory outside the tree, each
// example copied next to nothing but that SDK, built with its Makefile
// (probe.mk, clang) and installed into a probe directory, which it returns.
func sdkProbeDir(t *testing.T, examples ...string) string {
	t.Helper()
	for _, tool := range []string{"make", "clang"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.SkipOrFail(t, "%s not found (test/lab/install-deps.sh installs it): %v", tool, err)
		}
	}
	root, tmp := testutil.RepoRoot(), t.TempDir()
	run := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("make", append([]string{"-s", "-C", dir}, args...)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make -C %s %v: %v\n%s", dir, args, err, b)
		}
	}
	sdk, probeDir := filepath.Join(tmp, "sdk"), filepath.Join(tmp, "probedir")
	run(root, "sdk", "SDK_DIR="+sdk)
	for _, ex := range examples {
		src, dst := filepath.Join(root, "examples", "probes", ex), filepath.Join(tmp, ex)
		if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
			t.Fatal(err)
		}
		run(dst, "GPUEXT_SDK="+sdk)
		run(dst, "GPUEXT_SDK="+sdk, "install", "PROBE_DIR="+probeDir)
	}
	return probeDir
}

// simBlock is one block of a simulated launch: the kernel, its index, the
// SM it runs on and its entry and exit times on the device clock.
type simBlock struct {
	kernel      string
	block, sm   uint32
	entry, exit uint64
}

// The two example probes of examples/probes (not in the catalog), built
// outside the tree with only the SDK, loaded through a probe directory,
// compiled into one module, run in the PTX interpreter for every thread of
// simulated launches, copied out as the interposer does and read through
// their hash and records views: every count and record exact.
func TestSDKExampleProbes(t *testing.T) {
	dir := sdkProbeDir(t, "kernel-block-hist", "slow-blocks")
	cat, err := programs.BuiltinWithDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := compile.NewCompiler(cat, func() (helpers.Library, error) { return helpers.Library{}, nil }).
		Compile([]string{"kernel-block-hist", "slow-blocks"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := ptxinterp.Load(".version " + b.Manifest.MinPTX + "\n.target sm_70\n.address_size 64\n\n" + b.PTX)
	if err != nil {
		t.Fatal(err)
	}
	const threads, base = 64, uint64(1_700_000_000_000_000_000)
	vadd, slow := "_Z4vaddPfS_S_i", "_Z4slowPf"
	var blocks []simBlock
	t0 := base
	for launch := 0; launch < 2; launch++ { // vadd twice: blocks of 1000, 1500, 2000, 2500 ns
		for blk := uint32(0); blk < 4; blk++ {
			blocks = append(blocks, simBlock{vadd, blk, blk % 2, t0, t0 + 1000 + 500*uint64(blk)})
		}
		t0 += 1_000_000
	}
	for blk, ns := range []uint64{12000, 20000, 9000} { // slow once: two blocks past 10 us
		blocks = append(blocks, simBlock{slow, uint32(blk), 3 + uint32(blk), t0, t0 + ns})
	}
	nblocks := map[string]uint32{vadd: 4, slow: 3}
	for _, sb := range blocks {
		for _, fn := range []string{abi.FuncEntry, abi.FuncExit} {
			now := sb.entry
			if fn == abi.FuncExit {
				now = sb.exit
			}
			for tid := uint32(0); tid < threads; tid++ {
				regs := ptxinterp.ThreadRegs{
					Tid: [3]uint32{tid, 0, 0}, Ctaid: [3]uint32{sb.block, 0, 0},
					Ntid: [3]uint32{threads, 1, 1}, Nctaid: [3]uint32{nblocks[sb.kernel], 1, 1},
					LaneID: tid % 32, WarpID: tid / 32, SMID: sb.sm, Globaltimer: now,
				}
				if _, err := m.Call(fn, regs, abi.KernelID(sb.kernel)); err != nil {
					t.Fatalf("%s block %d thread %d %s: %v", sb.kernel, sb.block, tid, fn, err)
				}
			}
		}
	}

	f := &File{PID: 4321, Image: 0, Seq: 1, Final: true}
	for _, mi := range b.Manifest.Maps {
		f.Maps = append(f.Maps, Map{Name: mi.Name, Present: true, Bytes: append([]byte(nil), m.Global(mi.Symbol)...)})
	}
	acct := t.TempDir()
	writeFile(t, acct, "4321-0.maps", Encode(f))
	writeFile(t, acct, "4321.status", []byte("image=0 state=patched reason=ok kernels=2/2\n"))
	ten, err := ReadTenant(acct, &b.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	if len(ten.Skipped) > 0 {
		t.Fatalf("skipped %v", ten.Skipped)
	}
	sum := Summarize(ten, cat, b.Manifest.Probes)
	if len(sum) != 2 || sum[0].Name != "kernel-block-hist" || sum[1].Name != "slow-blocks" || len(sum[0].Missing)+len(sum[1].Missing) > 0 {
		t.Fatalf("summaries %+v", sum)
	}

	hex := func(k string) string { return fmt.Sprintf("0x%016x", abi.KernelID(k)) }
	h := sum[0].Hashes["kbh_hist"]
	type kb struct {
		kernel string
		bucket uint64
	}
	got := map[kb]uint64{}
	for i, e := range h.Top {
		got[kb{e.Key["kernel"].(string), e.Key["bucket"].(uint64)}] = e.Value["blocks"].(uint64)
		if i > 0 && e.Value["blocks"].(uint64) > h.Top[i-1].Value["blocks"].(uint64) {
			t.Errorf("top entry %d has more blocks than the one before: %v", i, h.Top)
		}
	}
	want := map[kb]uint64{ // bucket b: [2^(b-1), 2^b) ns
		{hex(vadd), 10}: 2, {hex(vadd), 11}: 4, {hex(vadd), 12}: 2,
		{hex(slow), 14}: 2, {hex(slow), 15}: 1,
	}
	if !reflect.DeepEqual(got, want) || h.Keys != 5 || h.Omitted != 0 || h.Sums["blocks"] != 11 {
		t.Errorf("kernel-block-hist: %d keys, sums %v, entries %v; want 5 keys, 11 blocks, %v", h.Keys, h.Sums, got, want)
	}

	r := sum[1].Records["sb_records"]
	wantRecs := []map[string]any{
		{"kernel": hex(slow), "block": uint64(0), "sm": uint64(3), "ns": uint64(12000)},
		{"kernel": hex(slow), "block": uint64(1), "sm": uint64(4), "ns": uint64(20000)},
	}
	if r.Count != 2 || r.Dropped != 0 || r.BadSize != 0 || !reflect.DeepEqual(r.Last, wantRecs) {
		t.Errorf("slow-blocks: %+v, want 2 records %v", r, wantRecs)
	}

	// A second image's copy adds to the same keys and appends its records.
	f.Image = 1
	writeFile(t, acct, "4321-1.maps", Encode(f))
	ten, err = ReadTenant(acct, &b.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	sum = Summarize(ten, cat, b.Manifest.Probes)
	if h := sum[0].Hashes["kbh_hist"]; h.Keys != 5 || h.Sums["blocks"] != 22 || h.Top[0].Value["blocks"] != uint64(8) {
		t.Errorf("two images: %d keys, %v blocks, top %v; want 5 keys, 22 blocks, top 8", h.Keys, h.Sums, h.Top[0])
	}
	if r := sum[1].Records["sb_records"]; r.Count != 4 || len(r.Last) != 4 || !reflect.DeepEqual(r.Last[2:], wantRecs) {
		t.Errorf("two images: %+v, want 4 records, the second image's last", r)
	}
}

// A records view keeps the view's last records; a record of another size
// (a ring buffer written by another build of the probe) is counted, not
// decoded; a hash entry of another key size likewise.
func TestViewsOfForeignSizes(t *testing.T) {
	v := programs.View{Map: "r", Kind: programs.ViewRecords, Last: 2,
		Record: []programs.Field{{Name: "a", Type: programs.FieldU32}, {Name: "s", Type: programs.FieldString, Size: 4}}}
	rec := func(a uint32, s string) []byte {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint32(b, a)
		copy(b[4:], s)
		return b
	}
	agg := &Aggregate{Records: 4, Dropped: 1, RecordData: [][]byte{rec(1, "one"), rec(2, "two"), {1, 2, 3}, rec(3, "thr\n")}}
	r := recordsSummary(v, agg)
	want := []map[string]any{{"a": uint64(2), "s": "two"}, {"a": uint64(3), "s": `thr\n`}}
	if r.Count != 4 || r.Dropped != 1 || r.BadSize != 1 || !reflect.DeepEqual(r.Last, want) {
		t.Errorf("records %+v, want the last 2 of the 3 of the right size %v", r, want)
	}
	hv := programs.View{Map: "h", Kind: programs.ViewHash, Top: 1,
		Key: []programs.Field{{Name: "k", Type: programs.FieldU32}}, Value: []programs.Field{{Name: "n", Type: programs.FieldU64}}}
	le := func(n int, v uint64) []byte { b := make([]byte, 8); binary.LittleEndian.PutUint64(b, v); return b[:n] }
	hagg := &Aggregate{Layout: abi.MapLayout{Type: abi.MapHash, KeySize: 4, ValueSize: 8}}
	hagg.HashEntries = append(hagg.HashEntries, entry(le(4, 1), le(8, 5)), entry(le(4, 2), le(8, 7)), entry(le(8, 3), le(8, 9)), entry(le(4, 1), le(8, 5)))
	h := hashSummary(hv, hagg)
	if h.Keys != 2 || h.BadSize != 1 || h.Omitted != 1 || h.Sums["n"] != 17 ||
		!reflect.DeepEqual(h.Top, []HashEntry{{Key: map[string]any{"k": uint64(1)}, Value: map[string]any{"n": uint64(10)}}}) {
		t.Errorf("hash %+v, want key 1 (5+5) on top of key 2 (7), one entry of another size", h)
	}
}

func entry(k, v []byte) devmap.Entry { return devmap.Entry{Key: k, Value: v} }

// A hash view whose layout is not the map's (the probe directory changed
// its descriptor after the tenant's module was built) counts the entries
// as of another size: it never decodes past them.
func TestHashViewOfAnotherLayout(t *testing.T) {
	hv := programs.View{Map: "h", Kind: programs.ViewHash,
		Key: []programs.Field{{Name: "k", Type: programs.FieldU64}}, Value: []programs.Field{{Name: "n", Type: programs.FieldU64}, {Name: "m", Type: programs.FieldU64}}}
	hagg := &Aggregate{Layout: abi.MapLayout{Type: abi.MapHash, KeySize: 4, ValueSize: 8}}
	hagg.HashEntries = []devmap.Entry{entry(make([]byte, 4), make([]byte, 8))}
	if h := hashSummary(hv, hagg); h.Keys != 0 || h.BadSize != 1 || len(h.Top) != 0 {
		t.Errorf("hash %+v, want the entry counted as of another size", h)
	}
}
