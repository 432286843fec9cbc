package compile

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/devmap"
	"github.com/gpuext/gpuext/gpubpf/ptxinterp"
)

// The executable check of the splice forms (no GPU here): the launch-stats
// bundle is spliced by the interposer's own patcher (ptxpatch_cli) into
// testdata/ptx/grid.ptx in four forms - dispatch call in every thread, call
// under the thread-0 guard, inline, inline under the guard - and each
// patched module runs in the PTX interpreter over a grid of blocks x
// threads (2-D blocks, several warps, early exit/ret paths). The counts must
// be exact (1 launch, one block and one block exit per block) and every
// form must leave the same bytes in every map and in the kernel's output.
func TestSplicedKernelCountsExact(t *testing.T) {
	cli := spliceCLI(t)
	b, err := testCompiler().Compile([]string{"launch-stats"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.Splice, "inline 1\n") || !strings.Contains(b.Splice, "guard_entry thread0\n") ||
		!strings.Contains(b.Splice, "guard_exit thread0\n") {
		t.Fatalf("launch-stats should splice inline under the thread-0 guard:\n%s", b.Splice)
	}
	dir := filepath.Join(t.TempDir(), "probes")
	if err := b.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	guard := "guard_entry thread0\nguard_exit thread0\n"
	forms := []struct {
		name, conf string
	}{
		{"call", b.Conf},
		{"call+guard", b.Conf + guard},
		{"inline", b.Conf + "inline 1\n"},
		{"inline+guard", b.Conf + b.Splice},
	}
	kernel := filepath.Join("..", "..", "devrt", "testdata", "ptx", "grid.ptx")
	const blocks, ntx, nty = 5, 40, 2 // 80 threads a block: 3 warps
	var ref map[string][]byte
	var refForm string
	for _, f := range forms {
		conf := filepath.Join(dir, f.name+".conf") // next to inline_*.ptx, where the patcher looks
		patched := spliceFile(t, cli, f.name, conf, f.conf, filepath.Join(dir, abi.ModuleFile), kernel)
		inline := strings.Contains(f.name, "inline")
		if got := strings.Contains(patched, "call __gpuext_probe_entry") || strings.Contains(patched, "call.uni __gpuext_probe_entry"); got == inline {
			t.Errorf("%s: dispatch call in the kernel = %v", f.name, got)
		}
		// the inline templates were translated for the guard (ptx.GuardMark): the
		// patcher guards them even when module.conf does not ask for it
		if got := strings.Contains(patched, "bra $__gpuext_skip_entry;"); got != (strings.Contains(f.name, "guard") || inline) {
			t.Errorf("%s: guard in the kernel = %v", f.name, got)
		}
		m, err := ptxinterp.Load(patched)
		if err != nil {
			t.Fatalf("%s: load: %v", f.name, err)
		}
		res := m.Alloc(make([]byte, 4*blocks*ntx*nty))
		for bx := uint32(0); bx < blocks; bx++ {
			for ty := uint32(0); ty < nty; ty++ {
				for tx := uint32(0); tx < ntx; tx++ {
					lin := ty*ntx + tx
					th := ptxinterp.ThreadRegs{
						Tid: [3]uint32{tx, ty, 0}, Ctaid: [3]uint32{bx, 0, 0},
						Ntid: [3]uint32{ntx, nty, 1}, Nctaid: [3]uint32{blocks, 1, 1},
						LaneID: lin % 32, WarpID: 4*bx + lin/32, SMID: bx % 2,
						Globaltimer: 1_000_000 + uint64(bx)*1000 + uint64(lin), GlobaltimerStep: 7 + uint64(bx),
					}
					if _, err := m.Call("_Z4gridPj", th, res); err != nil {
						t.Fatalf("%s: block %d thread (%d,%d): %v", f.name, bx, tx, ty, err)
					}
				}
			}
		}
		state := map[string][]byte{}
		for _, mi := range b.Manifest.Maps {
			state[mi.Name] = bytes.Clone(m.Global(mi.Symbol))
		}
		state["out"], _ = m.Read(res, 4*blocks*ntx*nty)
		// out[i] = i, except the threads with tid.x == 3, which left first
		for i := uint32(0); i < blocks*ntx*nty; i++ {
			want := i
			if (i%(ntx*nty))%ntx == 3 {
				want = 0
			}
			if got := binary.LittleEndian.Uint32(state["out"][4*i:]); got != want {
				t.Fatalf("%s: out[%d] = %d, want %d", f.name, i, got, want)
			}
		}
		checkLaunchStats(t, f.name, b.Manifest.Maps[0].Layout, state["ls_counters"], blocks)
		if ref == nil {
			ref, refForm = state, f.name
			continue
		}
		for name, want := range ref {
			if name == "ls_counters" {
				// a per-warp map updated only atomically: the inline form
				// picks the block's slot, the call form the warp's (ptx
				// atomicOnlyMaps); the sums, compared above, are the map
				continue
			}
			if !bytes.Equal(state[name], want) {
				t.Errorf("%s: %s differs from the %s form", f.name, name, refForm)
			}
		}
	}
}

// The late entry site (module.conf entry_late, on by default): in
// testdata/ptx/late.ptx the only global load follows a bounds check, so the
// entry block goes after the load, and the threads that branch around it
// (here whole blocks past n, thread 0 among them) run it at the exit.
// launch-stats' counts must stay exact and the kernel's output unchanged,
// against the same bundle with the entry block at the first statement
// (entry_late 0), and the late form must be the one emitted by default.
func TestSplicedLateEntryExact(t *testing.T) {
	cli, b, dir := launchStatsBundle(t)
	kernel := filepath.Join("..", "..", "devrt", "testdata", "ptx", "late.ptx")
	const blocks, ntx, n = 5, 64, 100 // blocks 0 and 1 load (thread 0 too); 2, 3 and 4 branch around the load
	const marker = "after the first global load"
	for _, f := range []struct {
		name, conf string
		late       bool
	}{
		{"inline+guard (default)", b.Conf + b.Splice, true},
		{"inline+guard entry_late 0", b.Conf + b.Splice + "entry_late 0\n", false},
	} {
		conf := filepath.Join(dir, "late.conf")
		patched := spliceFile(t, cli, f.name, conf, f.conf, filepath.Join(dir, abi.ModuleFile), kernel)
		if got := strings.Contains(patched, marker); got != f.late {
			t.Fatalf("%s: late entry site = %v, want %v:\n%s", f.name, got, f.late, patched)
		}
		m, err := ptxinterp.Load(patched)
		if err != nil {
			t.Fatalf("%s: load: %v", f.name, err)
		}
		init := make([]byte, 4*blocks*ntx)
		for i := 0; i < blocks*ntx; i++ {
			binary.LittleEndian.PutUint32(init[4*i:], uint32(1000+i))
		}
		res := m.Alloc(init)
		for bx := uint32(0); bx < blocks; bx++ {
			for tx := uint32(0); tx < ntx; tx++ {
				th := ptxinterp.ThreadRegs{
					Tid: [3]uint32{tx, 0, 0}, Ctaid: [3]uint32{bx, 0, 0},
					Ntid: [3]uint32{ntx, 1, 1}, Nctaid: [3]uint32{blocks, 1, 1},
					LaneID: tx % 32, WarpID: 2*bx + tx/32, SMID: bx % 2,
					Globaltimer: 1_000_000 + uint64(bx)*1000 + uint64(tx), GlobaltimerStep: 7 + uint64(bx),
				}
				if _, err := m.Call("_Z4bumpPjj", th, res, n); err != nil {
					t.Fatalf("%s: block %d thread %d: %v", f.name, bx, tx, err)
				}
			}
		}
		got, _ := m.Read(res, 4*blocks*ntx)
		for i := uint32(0); i < blocks*ntx; i++ {
			want := 1000 + i
			if i < n {
				want += i
			}
			if v := binary.LittleEndian.Uint32(got[4*i:]); v != want {
				t.Fatalf("%s: out[%d] = %d, want %d", f.name, i, v, want)
			}
		}
		// thread 0 of the blocks past n reads its entry's time at the exit
		checkLaunchStats(t, f.name, b.Manifest.Maps[0].Layout, bytes.Clone(m.Global(b.Manifest.Maps[0].Symbol)), blocks)
	}
}

// checkLaunchStats: launch-stats' counters after one launch of blocks
// blocks - launches, blocks, block_ns, block_exits - where thread 0 of
// block bx read the timer once for its entry and once at its exit, 7+bx
// apart (the interpreter's GlobaltimerStep in these tests).
func checkLaunchStats(t *testing.T, form string, layout abi.MapLayout, img []byte, blocks uint64) {
	t.Helper()
	ents, err := (&devmap.Image{Layout: layout, Bytes: img}).Entries()
	if err != nil {
		t.Fatal(err)
	}
	var counts []uint64
	for _, e := range ents {
		counts = append(counts, binary.LittleEndian.Uint64(e.Value))
	}
	blockNs := uint64(0)
	for bx := uint64(0); bx < blocks; bx++ {
		blockNs += 7 + bx
	}
	if got, want := fmt.Sprint(counts), fmt.Sprint([]uint64{1, blocks, blockNs, blocks}); got != want {
		t.Errorf("%s: ls_counters = %s, want %s", form, got, want)
	}
}

// launchStatsBundle: the interposer's patcher (ptxpatch_cli), launch-stats
// compiled, and the directory its bundle is written to.
func launchStatsBundle(t *testing.T) (cli string, b *Bundle, dir string) {
	t.Helper()
	cli = spliceCLI(t)
	b, err := testCompiler().Compile([]string{"launch-stats"})
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(t.TempDir(), "probes")
	if err := b.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	return cli, b, dir
}

// spliceFile writes module.conf text to conf and splices module into
// kernel with the interposer's patcher (ptxpatch_cli): the patched PTX.
func spliceFile(t *testing.T, cli, form, conf, text, module, kernel string) string {
	t.Helper()
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, stderr bytes.Buffer
	cmd := exec.Command(cli, "-c", conf, module, kernel)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: ptxpatch_cli: %v\n%s%s", form, err, out.String(), stderr.String())
	}
	return out.String()
}
