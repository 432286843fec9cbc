package ptx_test

import (
	"encoding/binary"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/devmap"
	"github.com/gpuext/gpuext/gpubpf/ptx"
	"github.com/gpuext/gpuext/gpubpf/ptxinterp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// counterSpec: a launch counter at kernel entry (array map, leader-guarded
// atomic add) and an exit probe that records the kernel id in a hash.
func counterSpec() *ebpf.CollectionSpec {
	return &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			"launches": {Name: "launches", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1},
			"kernels":  {Name: "kernels", Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: 64},
		},
		Programs: map[string]*ebpf.ProgramSpec{
			"count_launch": {Name: "count_launch", SectionName: abi.SecKernelEntry, Instructions: asm.Instructions{
				asm.Mov.Imm(asm.R1, 0),
				asm.BuiltinFunc(abi.HelperThreadLinearID).Call(),
				asm.JNE.Imm(asm.R0, 0, "out"),
				asm.BuiltinFunc(abi.HelperBlockLinearID).Call(),
				asm.JNE.Imm(asm.R0, 0, "out"),
				asm.StoreImm(asm.R10, -4, 0, asm.Word),
				asm.LoadMapPtr(asm.R1, 0).WithReference("launches"),
				asm.Mov.Reg(asm.R2, asm.R10),
				asm.Add.Imm(asm.R2, -4),
				asm.FnMapLookupElem.Call(),
				asm.JEq.Imm(asm.R0, 0, "out"),
				asm.Mov.Imm(asm.R1, 1),
				asm.AddAtomic.Mem(asm.R0, asm.R1, asm.DWord, 0),
				asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
				asm.Return(),
			}},
			"record_exit": {Name: "record_exit", SectionName: abi.SecKernelExit, Instructions: asm.Instructions{
				asm.LoadMem(asm.R2, asm.R1, 0, asm.DWord),
				asm.StoreMem(asm.R10, -8, asm.R2, asm.DWord),
				asm.LoadMem(asm.R3, asm.R1, 8, asm.Word),
				asm.StoreMem(asm.R10, -16, asm.R3, asm.DWord),
				asm.LoadMapPtr(asm.R1, 0).WithReference("kernels"),
				asm.Mov.Reg(asm.R2, asm.R10),
				asm.Add.Imm(asm.R2, -8),
				asm.Mov.Reg(asm.R3, asm.R10),
				asm.Add.Imm(asm.R3, -16),
				asm.Mov.Imm(asm.R4, 0),
				asm.FnMapUpdateElem.Call(),
				asm.Return(),
			}},
		},
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the translation (go test ./gpubpf/ptx -update rewrites it); got:\n%s", path, got)
	}
}

func TestGoldenModule(t *testing.T) {
	m, err := ptx.Translate(counterSpec(), nil, ptx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "counter.ptx", m.PTX)
	if m.Manifest.MinPTX == "" || m.Manifest.MinTarget == 0 || len(m.Manifest.Maps) != 2 || len(m.Manifest.Programs) != 2 {
		t.Fatalf("manifest: %+v", m.Manifest)
	}
	if got := m.Manifest.Maps[1]; got.Name != "launches" || got.Symbol != "__gpuext_map_launches" || got.Layout.Type != abi.MapArray {
		t.Errorf("manifest map: %+v", got)
	}
}

// The patcher's view: the dispatch functions run the programs of their
// attach point, and the maps show what the programs did.
func TestDispatchRunsProbes(t *testing.T) {
	m, err := ptx.Translate(counterSpec(), nil, ptx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	vm, err := ptxinterp.Load(m.Standalone("7.0", 70))
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(vm.Global(abi.SymTenantID), 42)
	kid := abi.KernelID("vecadd")
	// 2 blocks x 3 threads enter; only thread 0 of block 0 counts.
	for b := uint32(0); b < 2; b++ {
		for tid := uint32(0); tid < 3; tid++ {
			th := ptxinterp.ThreadRegs{Tid: [3]uint32{tid}, Ctaid: [3]uint32{b}, Ntid: [3]uint32{3, 1, 1}, Nctaid: [3]uint32{2, 1, 1}}
			if _, err := vm.Call(abi.FuncEntry, th, kid); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := vm.Call(abi.FuncExit, ptxinterp.Thread0(), kid); err != nil {
		t.Fatal(err)
	}
	l := devmap.Image{Layout: m.Manifest.Maps[1].Layout, Bytes: vm.Global("__gpuext_map_launches")}
	ents, err := l.Entries()
	if err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint64(ents[0].Value); got != 1 {
		t.Errorf("launch count = %d, want 1", got)
	}
	h := devmap.Image{Layout: m.Manifest.Maps[0].Layout, Bytes: vm.Global("__gpuext_map_kernels")}
	ents, err = h.Entries()
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || binary.LittleEndian.Uint64(ents[0].Key) != kid || binary.LittleEndian.Uint64(ents[0].Value) != 42 {
		t.Errorf("kernels map = %v, want {%#x: 42}", ents, kid)
	}
}

// block_linear_id and thread_linear_id on 1-D and 3-D grids and blocks:
// x + nx*(y + ny*z) whatever the dims. Every thread adds its linear id + 1
// at its block's linear id, so each block's entry is 1 + 2 + ... + threads.
func TestLinearIDs(t *testing.T) {
	spec := &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{"ids": {Name: "ids", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 64}},
		Programs: map[string]*ebpf.ProgramSpec{"ids": {Name: "ids", SectionName: abi.SecKernelEntry, Instructions: asm.Instructions{
			asm.BuiltinFunc(abi.HelperBlockLinearID).Call(),
			asm.StoreMem(asm.R10, -4, asm.R0, asm.Word),
			asm.BuiltinFunc(abi.HelperThreadLinearID).Call(),
			asm.Mov.Reg(asm.R6, asm.R0),
			asm.Add.Imm(asm.R6, 1),
			asm.LoadMapPtr(asm.R1, 0).WithReference("ids"),
			asm.Mov.Reg(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.AddAtomic.Mem(asm.R0, asm.R6, asm.DWord, 0),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
			asm.Return(),
		}}},
	}
	m, err := ptx.Translate(spec, nil, ptx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ grid, block [3]uint32 }{
		{[3]uint32{12, 1, 1}, [3]uint32{8, 1, 1}},
		{[3]uint32{2, 3, 2}, [3]uint32{2, 2, 2}},
		{[3]uint32{3, 1, 4}, [3]uint32{1, 8, 1}},
	} {
		vm, err := ptxinterp.Load(m.Standalone("7.0", 70))
		if err != nil {
			t.Fatal(err)
		}
		for bz := uint32(0); bz < tc.grid[2]; bz++ {
			for by := uint32(0); by < tc.grid[1]; by++ {
				for bx := uint32(0); bx < tc.grid[0]; bx++ {
					for tz := uint32(0); tz < tc.block[2]; tz++ {
						for ty := uint32(0); ty < tc.block[1]; ty++ {
							for tx := uint32(0); tx < tc.block[0]; tx++ {
								th := ptxinterp.ThreadRegs{Tid: [3]uint32{tx, ty, tz}, Ctaid: [3]uint32{bx, by, bz}, Ntid: tc.block, Nctaid: tc.grid}
								if _, err := vm.Call(abi.FuncEntry, th, 1); err != nil {
									t.Fatal(err)
								}
							}
						}
					}
				}
			}
		}
		img := devmap.Image{Layout: m.Manifest.Maps[0].Layout, Bytes: vm.Global("__gpuext_map_ids")}
		ents, err := img.Entries()
		if err != nil {
			t.Fatal(err)
		}
		blocks := int(tc.grid[0] * tc.grid[1] * tc.grid[2])
		want := uint64(8 * 9 / 2)
		for i, e := range ents {
			got := binary.LittleEndian.Uint64(e.Value)
			if (i < blocks && got != want) || (i >= blocks && got != 0) {
				t.Errorf("grid %v block %v: entry %d = %d, want %d for blocks 0..%d and 0 after", tc.grid, tc.block, i, got, want, blocks-1)
			}
		}
	}
}

func TestHelpersSpliced(t *testing.T) {
	helpers := ".version 8.4\n.target sm_80\n.address_size 64\n\n.func (.param .b64 r) " + abi.FuncMapLookup + "(.param .b64 a, .param .b64 b)\n{\n\tret;\n}\n"
	m, err := ptx.Translate(counterSpec(), []string{"count_launch"}, ptx.Options{Helpers: helpers})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(m.PTX, ".version") || strings.Contains(m.PTX, ".extern") || !strings.Contains(m.PTX, abi.FuncMapLookup+"(.param") {
		t.Errorf("fragment with helpers:\n%s", m.PTX)
	}
	if m.Manifest.MinPTX != "8.4" || m.Manifest.MinTarget != 80 {
		t.Errorf("minimums %s/%d, want the helper library's 8.4/80", m.Manifest.MinPTX, m.Manifest.MinTarget)
	}
	if len(m.Manifest.Maps) != 1 || len(m.Manifest.Programs) != 1 {
		t.Errorf("only count_launch and its map: %+v", m.Manifest)
	}
}

func TestRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		insns asm.Instructions
		want  string
	}{
		"unknown helper":     {asm.Instructions{asm.FnTracePrintk.Call(), asm.Return()}, "not supported"},
		"legacy packet load": {asm.Instructions{asm.LoadAbs(0, asm.Byte), asm.Return()}, "not supported"},
		"jump across functions": {asm.Instructions{
			asm.Call.Label("f"), asm.Ja.Label("g"), asm.Return(),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("f"), asm.Mov.Imm(asm.R0, 1).WithSymbol("g"), asm.Return(),
		}, "into another function"},
	} {
		spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{"p": {Name: "p", Instructions: tc.insns}}}
		if _, err := ptx.Translate(spec, nil, ptx.Options{}); err == nil {
			t.Errorf("%s: translated, want an error", name)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

// A bpf-to-bpf call: the subprogram gets r1-r5, its own stack, writes
// through a pointer into the caller's stack, and the caller's r6-r9
// survive it.
func TestSubprogramCall(t *testing.T) {
	spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{"p": {Name: "p", Instructions: asm.Instructions{
		asm.Mov.Imm(asm.R6, 100),
		asm.StoreImm(asm.RFP, -8, 0, asm.Word),
		asm.Mov.Reg(asm.R1, asm.RFP), asm.Add.Imm(asm.R1, -8),
		asm.Mov.Imm(asm.R2, 7),
		asm.Call.Label("sub"),
		asm.LoadMem(asm.R1, asm.RFP, -8, asm.Word), // 7*3 written by sub
		asm.Add.Reg(asm.R0, asm.R1),                // + sub's r0 (7+1)
		asm.Add.Reg(asm.R0, asm.R6),                // + 100: r6 kept
		asm.Return(),
		asm.Mov.Imm(asm.R6, 5).WithSymbol("sub"), // the callee's own r6
		asm.StoreMem(asm.RFP, -8, asm.R6, asm.DWord),
		asm.Mov.Reg(asm.R3, asm.R2), asm.Mul.Imm(asm.R3, 3),
		asm.StoreMem(asm.R1, 0, asm.R3, asm.Word),
		asm.Mov.Reg(asm.R0, asm.R2), asm.Add.Imm(asm.R0, 1),
		asm.Return(),
	}}}}
	m, err := ptx.Translate(spec, nil, ptx.Options{Harness: true})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "subprog.ptx", m.PTX)
	vm, err := ptxinterp.Load(m.Standalone("7.0", 70))
	if err != nil {
		t.Fatal(err)
	}
	ret := vm.Alloc(make([]byte, 8))
	if _, err := vm.Call(ptx.HarnessEntry("p"), ptxinterp.Thread0(), vm.Alloc(make([]byte, 8)), ret); err != nil {
		t.Fatal(err)
	}
	b, _ := vm.Read(ret, 8)
	if got := binary.LittleEndian.Uint64(b); got != 21+8+100 {
		t.Errorf("r0 = %d, want 129", got)
	}
}
