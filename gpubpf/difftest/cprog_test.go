package difftest_test

import (
	"encoding/binary"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/difftest"
	"github.com/gpuext/gpuext/gpubpf/internal/bpfc"
	"github.com/gpuext/gpuext/lib/testutil"
)

// TestCPrograms runs the clang-compiled programs of testdata/ (README.md)
// with several inputs each in the kernel and in the PTX interpreter.
func TestCPrograms(t *testing.T) {
	testutil.RequireRoot(t)
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

// TestPerThreadMapAgainstKernelArray: gpuext's per-thread map, run as
// thread 0 (its own row), against the kernel's array, which is what a row
// is to the one program that owns it: testdata/perthread.c with several
// inputs each, the device's maps of type per-thread (4 rows), the
// kernel's arrays as written. The kernel has no per-thread map; this is
// the differential test of a row's semantics (lookups in and out of range,
// every update flag and a bad one, plain, atomic and compare-and-swap
// writes, a struct value).
func TestPerThreadMapAgainstKernelArray(t *testing.T) {
	testutil.RequireRoot(t)
	obj := bpfc.CompileFlags(t, filepath.Join("testdata", "perthread.c"), []string{"-mcpu=v3"})
	for seed := uint64(0); seed < 32; seed++ {
		kspec, err := ebpf.LoadCollectionSpec(obj)
		if err != nil {
			t.Fatal(err)
		}
		dspec := kspec.Copy()
		for _, n := range []string{"rows", "recs"} {
			dspec.Maps[n].Type = ebpf.MapType(abi.MapTypePerThread)
			dspec.Maps[n].MapExtra = 4
		}
		r := rand.New(rand.NewPCG(seed, 11))
		ctx := make([]byte, (6+16)*8)
		for i := 0; i < 6; i++ {
			binary.LittleEndian.PutUint64(ctx[8*i:], r.Uint64())
		}
		if seed == 0 {
			dev, err := difftest.Translate(difftest.Case{Name: "perthread", Spec: dspec, Ctx: ctx})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, mi := range dev.Module.Manifest.Maps {
				if mi.Layout.Type == abi.MapPerThread && mi.Layout.NBuckets == 4 {
					n++
				}
			}
			if n != 2 {
				t.Fatalf("device maps %+v: want rows and recs per-thread with 4 rows", dev.Module.Manifest.Maps)
			}
		}
		k, err := difftest.RunKernel(difftest.Case{Name: "perthread", Spec: kspec, Ctx: ctx})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		d, err := difftest.RunDevice(difftest.Case{Name: "perthread", Spec: dspec, Ctx: ctx})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if len(d.Maps["rows"]) != 8 || len(d.Maps["recs"]) != 4 {
			t.Fatalf("seed %d: device maps %v: want rows of 8 and 4 entries", seed, d.Maps)
		}
		if diffs := difftest.Compare(k, d); len(diffs) > 0 {
			t.Errorf("seed %d: kernel array and per-thread row differ:\n  %v", seed, diffs)
		}
	}
}
