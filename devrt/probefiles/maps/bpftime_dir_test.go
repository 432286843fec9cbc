package maps

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"testing"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/compile"
	"github.com/gpuext/gpuext/gpubpf/helpers"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/gpubpf/ptxinterp"
	"github.com/gpuext/gpuext/lib/testutil"
)

// Our own bpftime-style programs (threadhist, kernelretsnoop, launchlate
// and cuda-counter shapes: kprobe/KERNEL sections, bpftime's helpers and
// GPU map types) as directory probes with descriptors: loaded through a
// probe directory, compiled into one module, run in the PTX interpreter
// for every thread of 2 launches of 5 blocks x 80 threads (entry of every
// thread of a block, then its exits), copied out as the interposer does,
// and read through their views (per-thread, records, counters, hash):
// every number exact.
func TestBpftimeProbeDirViews(t *testing.T) {
	names := []string{"thread-hist", "ret-snoop", "launch-bins", "call-counter"}
	cat, err := programs.BuiltinWithDir(testutil.BpftimeDir(t, "", names...))
	if err != nil {
		t.Fatal(err)
	}
	b, err := compile.NewCompiler(cat, func() (helpers.Library, error) { return helpers.Library{}, nil }).Compile(names)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(b.Manifest.Kernels) != "["+testutil.BpftimeKernel+"]" || !b.Manifest.LaunchTime {
		t.Fatalf("manifest kernels %v launch time %v, want the sections' kernel and launch time", b.Manifest.Kernels, b.Manifest.LaunchTime)
	}
	m, err := ptxinterp.Load(".version " + b.Manifest.MinPTX + "\n.target sm_70\n.address_size 64\n\n" + b.PTX)
	if err != nil {
		t.Fatal(err)
	}
	const (
		blocks, ntx, nty = 5, 40, 2
		threads          = blocks * ntx * nty
		tgid, tid        = 4321, 4330
	)
	le := binary.LittleEndian
	le.PutUint64(m.Global(abi.SymPidTgid), tgid<<32|tid)
	kid := abi.KernelID(testutil.BpftimeKernel)
	entry := func(launch, bx int) uint64 { return 1_000_000_000*uint64(launch+1) + 50_000 + uint64(bx)*1000 }
	for launch := 0; launch < 2; launch++ {
		// launch 0 started 50-54 us before its blocks (bin lt100us), launch 1 500-504 us (lt1ms)
		le.PutUint64(m.Global(abi.SymLaunchNs), entry(launch, 0)-50_000-uint64(launch)*450_000)
		for bx := 0; bx < blocks; bx++ {
			for _, fn := range []string{abi.FuncEntry, abi.FuncExit} {
				for ty := uint32(0); ty < nty; ty++ {
					for tx := uint32(0); tx < ntx; tx++ {
						lin := ty*ntx + tx
						now := entry(launch, bx)
						if fn == abi.FuncExit {
							now += 2000 + uint64(lin) // exit: 2 us + the thread's linear id after its block's entry
						}
						regs := ptxinterp.ThreadRegs{
							Tid: [3]uint32{tx, ty, 0}, Ctaid: [3]uint32{uint32(bx), 0, 0},
							Ntid: [3]uint32{ntx, nty, 1}, Nctaid: [3]uint32{blocks, 1, 1},
							LaneID: lin % 32, WarpID: lin / 32, SMID: uint32(bx), Globaltimer: now,
						}
						if _, err := m.Call(fn, regs, kid); err != nil {
							t.Fatalf("launch %d block %d thread (%d,%d) %s: %v", launch, bx, tx, ty, fn, err)
						}
					}
				}
			}
		}
	}

	f := &File{PID: tgid, Image: 0, Seq: 1, Final: true}
	for _, mi := range b.Manifest.Maps {
		f.Maps = append(f.Maps, Map{Name: mi.Name, Present: true, Bytes: append([]byte(nil), m.Global(mi.Symbol)...)})
	}
	acct := t.TempDir()
	writeFile(t, acct, fmt.Sprintf("%d-0.maps", tgid), Encode(f))
	writeFile(t, acct, fmt.Sprintf("%d.status", tgid), []byte("image=0 state=patched reason=ok kernels=1/1\n"))
	summarize := func() map[string]ProbeSummary {
		t.Helper()
		ten, err := ReadTenant(acct, &b.Manifest)
		if err != nil {
			t.Fatal(err)
		}
		if len(ten.Skipped) > 0 {
			t.Fatalf("skipped %v", ten.Skipped)
		}
		out := map[string]ProbeSummary{}
		for _, s := range Summarize(ten, cat, b.Manifest.Probes) {
			if len(s.Missing) > 0 {
				t.Fatalf("%s: missing %v", s.Name, s.Missing)
			}
			out[s.Name] = s
		}
		return out
	}
	sum := summarize()

	// threadhist: every thread of the launch (row = its linear id) exited twice
	wantRows := PerThreadSummary{Rows: abi.MapThreadSlots, Entries: []ThreadEntry{
		{Name: "exits", Used: threads, Sum: 2 * threads, Min: 2, Max: 2, MinRow: 0, MaxRow: 0, Log2: []uint64{0, 0, threads}}}}
	if got := sum["thread-hist"].PerThread["th_count"]; !reflect.DeepEqual(got, wantRows) {
		t.Errorf("thread-hist:\n got %+v\nwant %+v", got, wantRows)
	}
	// kernelretsnoop: one record per thread and launch; the last ones are
	// the last threads of the last block
	r := sum["ret-snoop"].Records["rs_events"]
	var last []map[string]any
	for lin := uint64(76); lin < 80; lin++ {
		last = append(last, map[string]any{"x": lin % ntx, "y": lin / ntx, "z": uint64(0), "ts": entry(1, blocks-1) + 2000 + lin})
	}
	if r.Count != 2*threads || r.Dropped != 0 || r.BadSize != 0 || !reflect.DeepEqual(r.Last, last) {
		t.Errorf("ret-snoop: %d records, %d dropped, %d bad, last %v; want %d, 0, 0, %v", r.Count, r.Dropped, r.BadSize, r.Last, 2*threads, last)
	}
	// launchlate: every thread of launch 0 in [10 us, 100 us), of launch 1 in [100 us, 1 ms)
	bins := map[string]uint64{"lt100ns": 0, "lt1us": 0, "lt10us": 0, "lt100us": threads, "lt1ms": threads, "lt10ms": 0, "lt100ms": 0, "lt1s": 0, "lt10s": 0, "ge10s": 0}
	if got := sum["launch-bins"].Counters; !reflect.DeepEqual(got, bins) {
		t.Errorf("launch-bins %v, want %v", got, bins)
	}
	// cuda-counter: every thread counted, each thread's time since its
	// block's start (2000 + linear id ns) added, the pid (tgid) stored
	perBlock := uint64(ntx*nty*2000 + (ntx*nty-1)*ntx*nty/2)
	cc := sum["call-counter"]
	if want := map[string]uint64{"threads": 2 * threads, "threadNs": 2 * blocks * perBlock, "pid": tgid}; !reflect.DeepEqual(cc.Counters, want) {
		t.Errorf("call-counter %v, want %v", cc.Counters, want)
	}
	h := cc.Hashes["cc_start"]
	if h.Keys != blocks || len(h.Top) != blocks || h.Top[0].Key["block"] != uint64(blocks-1) || h.Top[0].Value["startNs"] != entry(1, blocks-1) {
		t.Errorf("call-counter starts %+v, want %d blocks, block %d's start of launch 1 first", h, blocks, blocks-1)
	}

	// a second image's copy adds to the same rows
	f.Image = 1
	writeFile(t, acct, fmt.Sprintf("%d-1.maps", tgid), Encode(f))
	sum = summarize()
	wantRows.Entries[0] = ThreadEntry{Name: "exits", Used: threads, Sum: 4 * threads, Min: 4, Max: 4, MinRow: 0, MaxRow: 0, Log2: []uint64{0, 0, 0, threads}}
	if got := sum["thread-hist"].PerThread["th_count"]; !reflect.DeepEqual(got, wantRows) {
		t.Errorf("thread-hist over two images:\n got %+v\nwant %+v", got, wantRows)
	}
}
