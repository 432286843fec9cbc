package ptx_test

import (
	"encoding/binary"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/devmap"
	"github.com/gpuext/gpuext/gpubpf/ptx"
	"github.com/gpuext/gpuext/gpubpf/ptxinterp"
)

// The native helper library follows the device map spec: a probe that
// counts per key in a hash and appends to a ringbuf leaves exactly the
// entries and records the spec says, in the symbol bytes.
func TestNativeHelpers(t *testing.T) {
	spec := &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			"h":  {Name: "h", Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 4},
			"rb": {Name: "rb", Type: ebpf.RingBuf, MaxEntries: 64},
			"pw": {Name: "pw", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 2},
		},
		Programs: map[string]*ebpf.ProgramSpec{"p": {Name: "p", Instructions: asm.Instructions{
			// key = tid.x % 2 ; if lookup(h, key) { *v += 1 } else update(h, key, 1)
			asm.Mov.Imm(asm.R1, 0),
			asm.BuiltinFunc(abi.HelperThreadIdx).Call(),
			asm.And.Imm(asm.R0, 1),
			asm.StoreMem(asm.RFP, -4, asm.R0, asm.Word),
			asm.LoadMapPtr(asm.R1, 0).WithReference("h"),
			asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "insert"),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Ja.Label("log"),
			asm.Mov.Imm(asm.R1, 1).WithSymbol("insert"),
			asm.StoreMem(asm.RFP, -16, asm.R1, asm.DWord),
			asm.LoadMapPtr(asm.R1, 0).WithReference("h"),
			asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -4),
			asm.Mov.Reg(asm.R3, asm.RFP), asm.Add.Imm(asm.R3, -16),
			asm.Mov.Imm(asm.R4, 0),
			asm.FnMapUpdateElem.Call(),
			// ringbuf_output(rb, &key, 4, 0); per-warp count at index 1
			asm.LoadMapPtr(asm.R1, 0).WithReference("rb").WithSymbol("log"),
			asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -4),
			asm.Mov.Imm(asm.R3, 4),
			asm.Mov.Imm(asm.R4, 0),
			asm.FnRingbufOutput.Call(),
			asm.StoreImm(asm.RFP, -4, 1, asm.Word),
			asm.LoadMapPtr(asm.R1, 0).WithReference("pw"),
			asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"),
			asm.Return(),
		}}},
	}
	mod, err := ptx.Translate(spec, nil, ptx.Options{Harness: true})
	if err != nil {
		t.Fatal(err)
	}
	m, err := ptxinterp.Load(mod.Standalone("7.0", 70))
	if err != nil {
		t.Fatal(err)
	}
	ctx := m.Alloc(make([]byte, abi.CtxSize))
	ret := m.Alloc(make([]byte, 8))
	for tid := uint32(0); tid < 5; tid++ {
		th := ptxinterp.Thread0()
		th.Tid[0] = tid
		th.SMID, th.WarpID = tid, 0 // different warp slots
		if _, err := m.Call(ptx.HarnessEntry("p"), th, ctx, ret); err != nil {
			t.Fatal(err)
		}
	}
	dec := func(name string) []devmap.Entry {
		for _, mi := range mod.Manifest.Maps {
			if mi.Name == name {
				ents, err := (&devmap.Image{Layout: mi.Layout, Bytes: m.Global(mi.Symbol)}).Entries()
				if err != nil {
					t.Fatal(err)
				}
				return ents
			}
		}
		t.Fatalf("no map %s", name)
		return nil
	}
	h := dec("h")
	if len(h) != 2 || binary.LittleEndian.Uint64(h[0].Value) != 3 || binary.LittleEndian.Uint64(h[1].Value) != 2 {
		t.Errorf("hash = %v, want {0: 3, 1: 2}", h)
	}
	rb := dec("rb")
	// A 64-byte ring holds 56 bytes of records, as in the kernel: three
	// 16-byte records; the other two are dropped and counted.
	if len(rb) != 3 || binary.LittleEndian.Uint32(rb[1].Value) != 1 || len(rb[1].Value) != 4 {
		t.Errorf("ringbuf = %v, want 3 records of the 4-byte key", rb)
	}
	if dropped := binary.LittleEndian.Uint64(m.Global(ptx.MapSymbol("rb"))[abi.MapHdrSize+8:]); dropped != 2 {
		t.Errorf("ringbuf dropped = %d, want 2", dropped)
	}
	pw := dec("pw")
	if binary.LittleEndian.Uint64(pw[1].Value) != 5 || binary.LittleEndian.Uint64(pw[0].Value) != 0 {
		t.Errorf("per-warp sums = %v, want index 1 = 5", pw)
	}
}
