package compile

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/gpubpf/ptxinterp"
)

// A probe's hostWrites become module.conf host_write lines naming the
// element's u64 in its map's symbol (an array entry is [u64 seq][value]
// after the 32-byte descriptor), and turn launch times on. Run in the
// interpreter, our launchlate-shaped launch-gap counts every thread in the
// bin of its time since the launch only when those elements hold what the
// interposer writes (the launch time, the clock offset); without them every
// thread finds no launch time, as bpftime's launchlate did on gpuext with
// nothing writing its host uprobe's map.
func TestHostWritesInTheModule(t *testing.T) {
	spec := bpftimeSpec(t, "launch_gap.bpf.c")
	hw := []programs.HostWrite{{Map: "lg_host", Key: 0, Value: abi.HostLaunchTime}, {Map: "lg_clock", Key: 0, Value: abi.HostClockOffset}}
	b, err := compileInputs([]probeInput{{Name: "launch-gap", Object: "launch-gap.o", Spec: spec, Programs: []string{"lg_entry"}, HostWrites: hw}}, mustLib(t))
	if err != nil {
		t.Fatal(err)
	}
	if !b.Manifest.LaunchTime || !strings.Contains(b.Conf, "launch_time 1\n") {
		t.Errorf("hostWrites without launch times:\n%s", b.Conf)
	}
	want := "host_write launch-time __gpuext_map_lg_host 40\nhost_write clock-offset __gpuext_map_lg_clock 40\n"
	if !strings.HasSuffix(b.Conf, want) {
		t.Errorf("module.conf:\n%s\nwant it to end in\n%s", b.Conf, want)
	}
	if got := fmt.Sprint(b.Manifest.HostWrites); got != "[{lg_host 0 __gpuext_map_lg_host 40 launch-time} {lg_clock 0 __gpuext_map_lg_clock 40 clock-offset}]" {
		t.Errorf("manifest hostWrites %s", got)
	}
	for _, mi := range b.Manifest.Maps {
		if mi.Name == "lg_calib" {
			t.Errorf("lg_calib (the host uprobe's only) is in the module")
		}
	}

	const launched, offset = 999_000, 400_000 // the interpreter's %globaltimer starts at 1_000_000
	le := binary.LittleEndian
	for _, tc := range []struct {
		name  string
		write bool
	}{{"written", true}, {"nothing written", false}} {
		t.Run(tc.name, func(t *testing.T) {
			m := runGridWith(t, b, "call", func(m *ptxinterp.Machine) {
				if !tc.write {
					return
				}
				for _, w := range b.Manifest.HostWrites {
					v := uint64(launched)
					if w.Value == abi.HostClockOffset {
						v = offset
					}
					le.PutUint64(m.Global(w.Symbol)[w.Offset:], v)
				}
			})
			hist, misc := u64s(t, mapImage(t, b, m, "lg_hist")), u64s(t, mapImage(t, b, m, "lg_misc"))
			if !tc.write {
				if misc[0] != btThreads*btLaunches || hist[2] != 0 {
					t.Errorf("without host writes: %d threads without a launch time (want %d), bins %v", misc[0], btThreads*btLaunches, hist)
				}
				return
			}
			// each thread starts 1 to 6 us after the launch (the interpreter's clock)
			if hist[2] != btThreads*btLaunches || misc[0] != 0 {
				t.Errorf("bins %v (want all %d threads x launches in [1us, 10us)), %d without a launch time", hist, btThreads*btLaunches, misc[0])
			}
			if start := misc[1]; start < 1_000_000-offset || start > 1_100_000-offset {
				t.Errorf("a thread's start on the host clock %d, want its %%globaltimer - %d", start, offset)
			}
		})
	}
}
