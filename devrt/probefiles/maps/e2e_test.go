package maps

import (
	"encoding/binary"
	"testing"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/compile"
	"github.com/gpuext/gpuext/gpubpf/helpers"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/gpubpf/ptxinterp"
)

// The whole host-side pipeline on the real catalog probes: compile (verify,
// merge, translate) -> run the module's entry and exit dispatch in the PTX
// interpreter for every thread of simulated launches -> copy the map
// symbols out as the interposer does -> decode and summarise. The counts
// must be exactly those of the simulated launches.
func TestProbesCountSimulatedLaunches(t *testing.T) {
	const (
		launches  = 3
		blocks    = 6  // per launch
		threads   = 64 // per block: two warps
		sms       = 4
		base      = uint64(1_700_000_000_000_000_000)
		launchGap = 1_000_000
	)
	set := []string{"launch-count", "launch-stats", "sm-histogram", "launch-latency"}
	c := compile.NewCompiler(programs.Builtin(), func() (helpers.Library, error) { return helpers.Library{}, nil })
	b, err := c.Compile(set)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ptxinterp.Load(".version " + b.Manifest.MinPTX + "\n.target sm_70\n.address_size 64\n\n" + b.PTX)
	if err != nil {
		t.Fatal(err)
	}
	kid := abi.KernelID("_Z6vecaddPfS_S_i")
	var wantBlockNs uint64
	for l := uint64(0); l < launches; l++ {
		launchNs := base + l*launchGap
		binary.LittleEndian.PutUint64(m.Global(abi.SymLaunchNs), launchNs)
		for blk := uint32(0); blk < blocks; blk++ {
			sm := blk % sms
			entry := launchNs + 3000 + uint64(blk)*100 // block 0 starts 3 us after the launch
			exit := entry + 1000 + 10*uint64(blk)
			wantBlockNs += exit - entry
			for _, fn := range []string{abi.FuncEntry, abi.FuncExit} {
				now := entry
				if fn == abi.FuncExit {
					now = exit
				}
				for tid := uint32(0); tid < threads; tid++ {
					regs := ptxinterp.ThreadRegs{
						Tid: [3]uint32{tid, 0, 0}, Ctaid: [3]uint32{blk, 0, 0},
						Ntid: [3]uint32{threads, 1, 1}, Nctaid: [3]uint32{blocks, 1, 1},
						LaneID: tid % 32, WarpID: (blk/sms)*2 + tid/32, SMID: sm, Globaltimer: now,
					}
					if _, err := m.Call(fn, regs, kid); err != nil {
						t.Fatalf("launch %d block %d thread %d %s: %v", l, blk, tid, fn, err)
					}
				}
			}
		}
	}

	// Copy out as devrt/lib/probe_copyout.c does, in module.conf's map order.
	f := &File{PID: 1234, Image: 0, Seq: 1, Final: true}
	for _, mi := range b.Manifest.Maps {
		sym := m.Global(mi.Symbol)
		if sym == nil {
			t.Fatalf("module has no symbol %s", mi.Symbol)
		}
		f.Maps = append(f.Maps, Map{Name: mi.Name, Present: true, Bytes: append([]byte(nil), sym...)})
	}
	dir := t.TempDir()
	writeFile(t, dir, "1234-0.maps", Encode(f))
	writeFile(t, dir, "1234.status", []byte("image=0 state=patched reason=ok kernels=1/1\n"))
	ten, err := ReadTenant(dir, &b.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	if len(ten.Skipped) > 0 {
		t.Fatalf("skipped %v", ten.Skipped)
	}
	sum := Summarize(ten, programs.Builtin(), b.Manifest.Probes)
	byName := map[string]ProbeSummary{}
	for _, s := range sum {
		byName[s.Name] = s
	}

	ls := byName["launch-stats"]
	if got := ls.Counters["launches"]; got != launches {
		t.Errorf("launches = %d, want %d", got, launches)
	}
	if got := ls.Counters["blocks"]; got != launches*blocks {
		t.Errorf("blocks = %d, want %d", got, launches*blocks)
	}
	if got := ls.Counters["blockExits"]; got != launches*blocks {
		t.Errorf("block exits = %d, want %d", got, launches*blocks)
	}
	if got, want := ls.Means["meanBlockNs"], float64(wantBlockNs)/(launches*blocks); got != want {
		t.Errorf("mean block time = %v ns, want %v", got, want)
	}

	lc := byName["launch-count"]
	// counted at exit only (launch_count.bpf.c): blocks = blocks that ran to their end
	if got := lc.Counters; got["launches"] != launches || got["blocks"] != launches*blocks || len(got) != 2 {
		t.Errorf("launch-count = %v, want %d launches and %d blocks (and nothing else)", got, launches, launches*blocks)
	}

	smh := byName["sm-histogram"].SMs
	// 6 blocks on 4 SMs: SMs 0 and 1 run 2 blocks per launch, SMs 2 and 3 one.
	if smh == nil || smh.Used != sms || smh.Total != launches*blocks || smh.Max != 2*launches || smh.Min != launches {
		t.Errorf("sm histogram = %+v", smh)
	}

	lat := byName["launch-latency"]
	h := lat.Histograms["lat_hist"]
	// every launch: 3000 ns, bucket [2048, 4096)
	if h.Count != launches || h.P50 < 2048 || h.P50 > 4096 || h.Max != 4096 {
		t.Errorf("launch latency = %+v", h)
	}
	if lat.Counters["noLaunchTime"] != 0 || lat.Counters["clockBehind"] != 0 {
		t.Errorf("latency misc = %v", lat.Counters)
	}
}
