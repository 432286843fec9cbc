package difftest_test

import (
	"errors"
	"testing"
	"time"

	"github.com/gpuext/gpuext/devrt/probe/difftest"
	"github.com/gpuext/gpuext/internal/privtest"
)

// TestKernelVsDevice runs every corpus program in the host kernel and in
// the PTX interpreter and requires the same r0, context and maps.
func TestKernelVsDevice(t *testing.T) {
	privtest.RequireRoot(t)
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
