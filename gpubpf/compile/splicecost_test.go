package compile

import (
	"strings"
	"testing"

	"github.com/gpuext/gpuext/gpubpf/abi"
)

// spliceCost counts what an inline template makes the probing thread do, in
// PTX (ptxas removes the dead parts, the counts are an upper bound): the
// instructions (statements, not declarations or labels), the red.global
// and other atomics, the %globaltimer reads, and global loads and stores.
type spliceCost struct {
	insns, red, atom, timer, global int
}

func costOf(tmpl string) spliceCost {
	var c spliceCost
	for _, l := range strings.Split(tmpl, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasSuffix(l, ";") || strings.HasPrefix(l, "//") || strings.HasPrefix(l, ".reg") || strings.HasPrefix(l, ".local") {
			continue
		}
		c.insns++
		switch {
		case strings.Contains(l, "red.global"):
			c.red++
		case strings.Contains(l, "atom."):
			c.atom++
		case strings.Contains(l, "ld.global") || strings.Contains(l, "st.global"):
			c.global++
		}
		if strings.Contains(l, "%globaltimer") {
			c.timer++
		}
	}
	return c
}

// The spliced cost of the two cheapest probes, pinned so a change of the
// translator or of the programs that adds work at a site shows here (issue
// 16, section 5; docs/device-probes.md "What the splice emits"). Before
// this was pinned: launch-count entry 59 instructions with 2 red.adds,
// exit 29 with 1; launch-stats entry 82 with 3, exit 53 with 2. Now
// launch-count counts at exit only and launch-stats' entry keeps its time
// stamp and its block count in registers for the exit (deferSet): a
// block's only atomics are at its end, and at entry only block 0 makes one
// (the launch). If a number here changes on purpose, update it and say
// before and after in the commit message.
func TestSpliceCostPinned(t *testing.T) {
	for _, tc := range []struct {
		probe       string
		entry, exit spliceCost
	}{
		// exit: blocks, and in block 0 launches
		{"launch-count", spliceCost{}, spliceCost{insns: 58, red: 2}},
		// entry: the stamp into a register, block 0's launch; exit:
		// blockNs += exit - entry, blockExits, and the deferred blocks
		{"launch-stats", spliceCost{insns: 78, red: 1, timer: 1}, spliceCost{insns: 66, red: 3, timer: 1}},
	} {
		b, err := testCompiler().Compile([]string{tc.probe})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.Splice, "inline 1\n") {
			t.Fatalf("%s: not spliced inline:\n%s", tc.probe, b.Splice)
		}
		for _, s := range []struct {
			a    abi.Attach
			want spliceCost
		}{{abi.KernelEntry, tc.entry}, {abi.KernelExit, tc.exit}} {
			if got := costOf(b.Inline[s.a]); got != s.want {
				t.Errorf("%s %s: %+v, want %+v\n%s", tc.probe, s.a, got, s.want, b.Inline[s.a])
			}
		}
	}
}

// The deferral changes where a block's counts are made, not what they
// are: launch-stats' entry makes no per-block atomic (only block 0's, under
// its own branch), and its exit template carries the entry's time stamp in
// the add of blockNs. TestSplicedKernelCountsExact runs the same bundle in
// the interpreter against the call form, which makes every count where
// the program does.
func TestLaunchStatsEntryKeepsItsStampInARegister(t *testing.T) {
	b, err := testCompiler().Compile([]string{"launch-stats"})
	if err != nil {
		t.Fatal(err)
	}
	entry, exit := b.Inline[abi.KernelEntry], b.Inline[abi.KernelExit]
	if n := strings.Count(entry, "deferred to the exit"); n != 2 {
		t.Errorf("entry: %d deferred adds, want 2 (blockNs and blocks)\n%s", n, entry)
	}
	if !strings.Contains(exit, "%__gxd"+"@GXSITE@_0") || !strings.Contains(exit, "the entry's deferred counts") {
		t.Errorf("exit: the entry's registers are not added\n%s", exit)
	}
	if !strings.Contains(entry, ".reg .b64 %__gxd@GXSITE@_0;") {
		t.Errorf("entry: the deferred registers are not declared at kernel scope\n%s", entry)
	}
}
