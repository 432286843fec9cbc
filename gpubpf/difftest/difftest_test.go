package difftest_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/gpubpf/difftest"
	"github.com/gpuext/gpuext/lib/testutil"
)

// TestKernelVsDevice runs every corpus program in the host kernel and in
// the PTX interpreter and requires the same r0, context and maps.
func TestKernelVsDevice(t *testing.T) {
	testutil.RequireRoot(t)
	start := time.Now()
	corpus := difftest.Corpus(0)
	if len(corpus) < 300 {
		t.Fatalf("corpus has %d programs, want >= 300", len(corpus))
	}
	failed := 0
	for _, c := range corpus {
		if failed >= 5 {
			t.Fatalf("stopping after %d failing programs", failed)
		}
		k, err := difftest.RunKernel(c)
		if err != nil {
			if errors.Is(err, difftest.ErrVerifier) {
				t.Errorf("generator bug: %v\n%s", err, difftest.Dump(c))
			} else {
				t.Errorf("%v", err)
			}
			failed++
			continue
		}
		d, err := difftest.RunDevice(c)
		if err != nil {
			t.Errorf("device: %v\n%s", err, difftest.Dump(c))
			failed++
			continue
		}
		if diffs := difftest.Compare(k, d); len(diffs) > 0 {
			t.Errorf("%s: kernel and device differ:\n  %v\n%s", c.Name, diffs, difftest.Dump(c))
			failed++
		}
	}
	t.Logf("%d programs, %d mismatched, %v", len(corpus), failed, time.Since(start).Round(time.Millisecond))
}

// The corpus is deterministic: the GPU corpus and CI run the same programs.
func TestCorpusDeterministic(t *testing.T) {
	a, b := difftest.Corpus(40), difftest.Corpus(40)
	for i := range a {
		if difftest.Dump(a[i]) != difftest.Dump(b[i]) {
			t.Fatalf("%s differs between two generations", a[i].Name)
		}
	}
}

// The GPU corpus round-trips: corpus.ptx and corpus.txt, written and read
// back, pass the Go twin of probe_diff.cu, and a wrong expectation is
// reported as a mismatch.
func TestGPUCorpusSelfCheck(t *testing.T) {
	testutil.RequireRoot(t)
	module, exp, err := difftest.BuildCorpus(difftest.Corpus(48), "")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := difftest.WriteCorpus(&buf, exp); err != nil {
		t.Fatal(err)
	}
	back, err := difftest.ParseCorpus(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 48 {
		t.Fatalf("read back %d programs, want 48", len(back))
	}
	bad, err := difftest.CheckCorpus(module, back, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Fatalf("corpus self-check: %d mismatches:\n%s", len(bad), strings.Join(bad, "\n"))
	}
	back[5].CtxOut[CtxRegsForTest] ^= 1
	back[4].Maps[0].Entries += " 00:00"
	bad, err = difftest.CheckCorpus(module, back, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) != 2 || !strings.Contains(bad[0], back[4].Name) || !strings.Contains(bad[1], back[5].Name) {
		t.Errorf("two corrupted expectations reported as %q", bad)
	}
}

const CtxRegsForTest = difftest.CtxRegs
