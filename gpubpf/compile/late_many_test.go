package compile

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/devmap"
	"github.com/gpuext/gpuext/gpubpf/ptxinterp"
)

// The late entry site in a module of several nvcc kernels (the torch
// extension of make gpu-test's probes-count-torch): launch-stats counts
// every launch and block of each kernel exactly, across the kernels of one
// image, with the blocks past n branching around the load (thread 0 of the
// last block too), and the kernels compute what they compute unspliced.
func TestSplicedLateEntryManyKernels(t *testing.T) {
	cli, b, dir := launchStatsBundle(t)
	kernel := filepath.Join("..", "..", "devrt", "testdata", "ptx", "torchext_int.ptx")
	patched := spliceFile(t, cli, "inline", filepath.Join(dir, "t.conf"), b.Conf+b.Splice, filepath.Join(dir, abi.ModuleFile), kernel)
	if got := bytes.Count([]byte(patched), []byte("after the first global load, thread 0")); got != 3 {
		t.Fatalf("%d kernels with the late entry site, want 3", got)
	}
	plain, err := os.ReadFile(kernel)
	if err != nil {
		t.Fatal(err)
	}
	const blocks, ntx, n = 4, 64, 150 // thread 0 of block 3 (i = 192) branches around every load
	run := func(text string, check func(k int)) []byte {
		m, err := ptxinterp.Load(text)
		if err != nil {
			t.Fatal(err)
		}
		init := make([]byte, 4*blocks*ntx)
		for i := 0; i < blocks*ntx; i++ {
			binary.LittleEndian.PutUint32(init[4*i:], uint32(int32(i%7-3))) // some negative for k_relu
		}
		buf := m.Alloc(init)
		for k, kn := range []struct {
			name string
			args []uint64
		}{{"_Z5k_addPKfS0_Pfi", []uint64{buf, buf, buf, n}}, {"_Z6k_reluPfi", []uint64{buf, n}}, {"_Z7k_scalePffi", []uint64{buf, 3, n}}} {
			for bx := uint32(0); bx < blocks; bx++ {
				for tx := uint32(0); tx < ntx; tx++ {
					th := ptxinterp.ThreadRegs{Tid: [3]uint32{tx, 0, 0}, Ctaid: [3]uint32{bx, 0, 0}, Ntid: [3]uint32{ntx, 1, 1},
						Nctaid: [3]uint32{blocks, 1, 1}, LaneID: tx % 32, WarpID: 2*bx + tx/32, SMID: bx % 2,
						Globaltimer: 1_000_000 + uint64(bx)*1000, GlobaltimerStep: 7 + uint64(bx)}
					if _, err := m.Call(kn.name, th, kn.args...); err != nil {
						t.Fatalf("%s: block %d thread %d: %v", kn.name, bx, tx, err)
					}
				}
			}
			if check != nil {
				ents, err := (&devmap.Image{Layout: b.Manifest.Maps[0].Layout, Bytes: bytes.Clone(m.Global(b.Manifest.Maps[0].Symbol))}).Entries()
				if err != nil {
					t.Fatal(err)
				}
				var counts []uint64
				for _, e := range ents {
					counts = append(counts, binary.LittleEndian.Uint64(e.Value))
				}
				// after k+1 launches: launches, blocks, block_ns (thread 0 of block bx: 7+bx), block_exits
				w := uint64(k + 1)
				if got, want := fmt.Sprint(counts), fmt.Sprint([]uint64{w, w * blocks, w * (7 + 8 + 9 + 10), w * blocks}); got != want {
					t.Errorf("after %s: ls_counters = %s, want %s", kn.name, got, want)
				}
			}
		}
		out, _ := m.Read(buf, 4*blocks*ntx)
		return out
	}
	want := run(string(plain), nil)
	if got := run(patched, func(int) {}); !bytes.Equal(got, want) {
		t.Errorf("the spliced kernels computed other values than the plain ones")
	}
}
