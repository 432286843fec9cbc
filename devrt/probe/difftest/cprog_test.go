package difftest_test

import (
	"encoding/binary"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/gpuext/gpuext/devrt/probe/difftest"
	"github.com/gpuext/gpuext/devrt/probe/internal/bpfc"
	"github.com/gpuext/gpuext/internal/privtest"
)

// TestCPrograms runs the clang-compiled programs of testdata/ (README.md)
// with several inputs each in the kernel and in the PTX interpreter.
func TestCPrograms(t *testing.T) {
	privtest.RequireRoot(t)
	for _, name := range []string{"arith", "maps"} {
		obj := bpfc.CompileFlags(t, filepath.Join("testdata", name+".c"), []string{"-mcpu=v3"})
		for seed := uint64(0); seed < 16; seed++ {
			spec, err := ebpf.LoadCollectionSpec(obj)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(seed, 7))
			ctx := make([]byte, (6+16)*8)
			for i := 0; i < 6; i++ {
				v := r.Uint64()
				if seed%4 == 1 {
					v >>= r.IntN(64) // small values too
				}
				binary.LittleEndian.PutUint64(ctx[8*i:], v)
			}
			c := difftest.Case{Name: name, Spec: spec, Ctx: ctx}
			k, err := difftest.RunKernel(c)
			if err != nil {
				t.Fatalf("%s seed %d: %v", name, seed, err)
			}
			d, err := difftest.RunDevice(c)
			if err != nil {
				t.Fatalf("%s seed %d: %v", name, seed, err)
			}
			if diffs := difftest.Compare(k, d); len(diffs) > 0 {
				t.Errorf("%s seed %d: kernel and device differ:\n  %v\n%s", name, seed, diffs, difftest.Dump(c))
			}
		}
	}
}
