package main

import (
	"encoding/binary"
	"testing"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/devmap"
	"github.com/gpuext/gpuext/lib/testutil"
)

// `gpuextctl probes read` shows a per-thread view (a bpftime-style
// threadhist from the config's probeDir): the rows used, their sum, the
// fewest and most of a row with the row, the log2 buckets of the rows, and
// the accesses by threads past the last row.
func TestProbesReadPerThreadView(t *testing.T) {
	le := binary.LittleEndian
	out := probesReadDir(t, testutil.BpftimeDir(t, "", "thread-hist"), []string{"thread-hist"}, func(m abi.MapInfo, im *devmap.Image) {
		d := im.Bytes[abi.MapHdrSize:]
		for g := 0; g < 10; g++ { // rows 0-9 exited 3 times, row 10 7 times
			le.PutUint64(d[8*g:], 3)
		}
		le.PutUint64(d[8*10:], 7)
		le.PutUint64(d[8*m.Layout.NBuckets:], 2) // two accesses past the last row
	})
	want := "processes 1, images patched 1, unpatched 0\n" +
		"thread-hist:\n" +
		"  thread-hist: th_count: per-thread, 65536 rows, 2 accesses past the last row\n" +
		"    exits: rows used=11 sum=37 min=3 (row 0) max=7 (row 10) log2: [2,4)=10 [4,8)=1\n"
	if out != want {
		t.Errorf("probes read:\n%s\nwant:\n%s", out, want)
	}
}
