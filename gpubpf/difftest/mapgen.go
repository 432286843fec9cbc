package difftest

import (
	"encoding/binary"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

type mapGen struct {
	name string
	spec *ebpf.MapSpec
	keys [][]byte // hash: the key set (at most MaxEntries keys)
}

func (g *gen) newMap(t ebpf.MapType) *mapGen {
	mg := &mapGen{name: "m" + string(rune('a'+len(g.maps)))}
	ms := &ebpf.MapSpec{Name: mg.name, Type: t}
	switch t {
	case ebpf.RingBuf:
		ms.MaxEntries = 4096 // the kernel's smallest ring: one page
		mg.spec = ms
		g.maps[mg.name] = ms
		return mg
	case ebpf.PerCPUArray:
		ms.KeySize = 4
		ms.ValueSize = []uint32{4, 8, 16}[g.r.IntN(3)]
		ms.MaxEntries = []uint32{1, 4}[g.r.IntN(2)]
		// No initial contents: the kernel would need one value per CPU.
		mg.spec = ms
		g.maps[mg.name] = ms
		return mg
	case ebpf.Array:
		ms.KeySize = 4
		ms.ValueSize = []uint32{4, 8, 12, 16, 24}[g.r.IntN(5)]
		ms.MaxEntries = []uint32{1, 4, 8}[g.r.IntN(3)]
	case ebpf.Hash:
		ms.KeySize = []uint32{4, 8, 12}[g.r.IntN(3)]
		ms.ValueSize = []uint32{8, 12, 16}[g.r.IntN(3)]
		ms.MaxEntries = []uint32{4, 8, 16}[g.r.IntN(3)]
		// Never more distinct keys than entries: the device hash does not
		// count entries (see devmap.Image.Update), the kernel does.
		for i := uint32(0); i < ms.MaxEntries; i++ {
			k := make([]byte, ms.KeySize)
			for j := range k {
				k[j] = byte(g.r.IntN(4)) // small alphabet: colliding prefixes
			}
			k[0] = byte(i)
			mg.keys = append(mg.keys, k)
		}
	}
	// Initial contents, loaded by the kernel and laid out in the device image.
	for i := 0; i < g.r.IntN(4); i++ {
		v := make([]byte, ms.ValueSize)
		for j := 0; j+8 <= len(v); j += 8 {
			binary.LittleEndian.PutUint64(v[j:], g.value())
		}
		if len(v)%8 != 0 {
			binary.LittleEndian.PutUint32(v[len(v)-4:], uint32(g.value()))
		}
		var k []byte
		if t == ebpf.Array {
			k = binary.LittleEndian.AppendUint32(nil, uint32(g.r.IntN(int(ms.MaxEntries))))
		} else {
			k = mg.keys[g.r.IntN(len(mg.keys))]
		}
		ms.Contents = append(ms.Contents, ebpf.MapKV{Key: k, Value: v})
	}
	mg.spec = ms
	g.maps[mg.name] = ms
	return mg
}

// key writes a key to the stack at keyOff.
func (g *gen) key(mg *mapGen) {
	if mg.spec.Type != ebpf.Hash {
		if g.r.IntN(3) == 0 {
			g.emit(asm.Mov.Reg(asm.R1, []asm.Register{asm.R6, asm.R7}[g.r.IntN(2)]))
			g.emit(asm.And.Imm(asm.R1, 7))
			g.emit(asm.StoreMem(asm.RFP, keyOff, asm.R1, asm.Word))
			return
		}
		g.emit(stImm(asm.RFP, keyOff, int64(g.r.IntN(int(mg.spec.MaxEntries)+2)), asm.Word))
		return
	}
	k := mg.keys[g.r.IntN(len(mg.keys))]
	for j := 0; j < len(k); j += 4 {
		g.emit(stImm(asm.RFP, keyOff+int16(j), int64(int32(binary.LittleEndian.Uint32(k[j:]))), asm.Word))
	}
}

// value writes an update value to the stack at valOff.
func (g *gen) val(mg *mapGen) {
	vs := int(mg.spec.ValueSize)
	for j := 0; j < vs; {
		if vs-j >= 8 && j%8 == 0 && g.r.IntN(2) == 0 {
			g.emit(asm.StoreMem(asm.RFP, valOff+int16(j), []asm.Register{asm.R6, asm.R7}[g.r.IntN(2)], asm.DWord))
			j += 8
			continue
		}
		g.emit(stImm(asm.RFP, valOff+int16(j), int64(g.imm32()), asm.Word))
		j += 4
	}
}

func (g *gen) mapPtr(mg *mapGen, r asm.Register) {
	g.emit(asm.LoadMapPtr(r, 0).WithReference(mg.name))
}

var atomics = []asm.AtomicOp{asm.AddAtomic, asm.FetchAdd, asm.AndAtomic, asm.FetchAnd, asm.OrAtomic, asm.FetchOr,
	asm.XorAtomic, asm.FetchXor, asm.Xchg, asm.CmpXchg}

// access picks a naturally aligned access of one of sizes inside the value.
func (g *gen) access(mg *mapGen, sizes []asm.Size) (asm.Size, int16) {
	vs := int(mg.spec.ValueSize)
	for {
		sz := sizes[g.r.IntN(len(sizes))]
		n := sz.Sizeof()
		if n > vs {
			continue
		}
		return sz, int16(g.r.IntN(vs/n) * n)
	}
}

func (g *gen) lookupBlock(mg *mapGen, atomicHeavy bool) {
	g.key(mg)
	g.mapPtr(mg, asm.R1)
	g.emit(asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, keyOff))
	g.emit(asm.FnMapLookupElem.Call())
	miss, done := g.newLabel(), g.newLabel()
	g.jump(asm.JEq.Imm(asm.R0, 0, ""), miss)
	g.emit(asm.Mov.Reg(asm.R4, asm.R0))
	for j := 0; j < 1+g.r.IntN(4); j++ {
		k := g.r.IntN(6)
		if atomicHeavy {
			k = 4 + g.r.IntN(2)
		}
		src := []asm.Register{asm.R6, asm.R7}[g.r.IntN(2)]
		switch k {
		case 0:
			sz, off := g.access(mg, sizes)
			g.emit(asm.LoadMem(src, asm.R4, off, sz))
		case 1:
			sz, off := g.access(mg, []asm.Size{asm.Byte, asm.Half, asm.Word})
			g.emit(asm.LoadMemSX(src, asm.R4, off, sz))
		case 2:
			sz, off := g.access(mg, sizes)
			g.emit(asm.StoreMem(asm.R4, off, src, sz))
		case 3:
			sz, off := g.access(mg, sizes)
			g.emit(stImm(asm.R4, off, int64(g.imm32()), sz))
		default:
			sz, off := g.access(mg, []asm.Size{asm.Word, asm.DWord})
			op := atomics[g.r.IntN(len(atomics))]
			if op == asm.CmpXchg {
				if g.r.IntN(2) == 0 {
					g.emit(asm.LoadMem(asm.R0, asm.R4, off, sz)) // compare equal: the exchange happens
				} else {
					g.emit(asm.Mov.Reg(asm.R0, asm.R6))
				}
				src = asm.R7
			}
			g.emit(atomicIns(op, asm.R4, src, sz, off))
			if op == asm.CmpXchg {
				g.emit(asm.Xor.Reg(asm.R6, asm.R0))
			}
		}
	}
	g.jump(asm.Ja.Label(""), done)
	g.mark(miss)
	g.emit(asm.Add.Imm(asm.R6, 0x1000))
	g.mark(done)
	g.reinit(false)
}

func (g *gen) updateBlock(mg *mapGen) {
	g.key(mg)
	g.val(mg)
	g.mapPtr(mg, asm.R1)
	g.emit(asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, keyOff))
	g.emit(asm.Mov.Reg(asm.R3, asm.RFP), asm.Add.Imm(asm.R3, valOff))
	flags := []int32{0, 0, 1, 2, 3}[g.r.IntN(5)]
	g.emit(asm.Mov.Imm(asm.R4, flags))
	g.emit(asm.FnMapUpdateElem.Call())
	g.emit(asm.LSh.Imm(asm.R6, 3), asm.Xor.Reg(asm.R6, asm.R0))
	g.reinit(g.r.IntN(2) == 0)
}

func (g *gen) deleteBlock(mg *mapGen) {
	g.key(mg)
	g.mapPtr(mg, asm.R1)
	g.emit(asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, keyOff))
	g.emit(asm.FnMapDeleteElem.Call())
	g.emit(asm.LSh.Imm(asm.R7, 5), asm.Add.Reg(asm.R7, asm.R0))
	g.reinit(g.r.IntN(2) == 0)
}

// mapProgram: a few map operations on one or two maps, with ALU between.
func (g *gen) mapProgram(t ebpf.MapType, atomicHeavy bool) {
	mgs := []*mapGen{g.newMap(t)}
	if g.r.IntN(3) == 0 {
		mgs = append(mgs, g.newMap([]ebpf.MapType{ebpf.Array, ebpf.Hash}[g.r.IntN(2)]))
	}
	for j := 0; j < 3+g.r.IntN(6); j++ {
		mg := mgs[g.r.IntN(len(mgs))]
		switch k := g.r.IntN(10); {
		case k < 4 || atomicHeavy && k < 7:
			g.lookupBlock(mg, atomicHeavy)
		case k < 8:
			g.updateBlock(mg)
		default:
			g.deleteBlock(mg)
		}
		for a := 0; a < g.r.IntN(4); a++ {
			g.alu(g.r.IntN(2) == 0)
		}
	}
}

// atomicIns is op.Mem with the imm set: cilium/ebpf v0.22's Marshal takes
// the imm before it fills in the atomic operation, so an atomic built by
// asm alone reaches the kernel as BPF_ADD (imm 0) whatever its op.
func atomicIns(op asm.AtomicOp, dst, src asm.Register, sz asm.Size, off int16) asm.Instruction {
	in := op.Mem(dst, src, sz, off)
	in.Constant = int64(op >> 8)
	return in
}

// ringbufProgram: bursts of ringbuf_output from the stack, in loops long
// enough to fill the 4096-byte ring, so both the records and the -EAGAIN
// of a full ring are compared.
func (g *gen) ringbufProgram() {
	mg := g.newMap(ebpf.RingBuf)
	for j := 0; j < 2+g.r.IntN(3); j++ {
		size := []int32{0, 1, 4, 8, 13, 24, 40, 64}[g.r.IntN(8)]
		count := []int32{2, 20, 60, 70}[g.r.IntN(4)]
		g.counter = asm.R8
		g.emit(asm.Mov.Imm(asm.R8, count))
		top := g.newLabel()
		g.mark(top)
		g.emit(asm.Mul.Imm(asm.R6, 5), asm.Add.Imm(asm.R6, 1))
		g.emit(asm.StoreMem(asm.RFP, -int16(8*(1+g.r.IntN(8))), asm.R6, asm.DWord))
		g.mapPtr(mg, asm.R1)
		g.emit(asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -stackScratch))
		g.emit(asm.Mov.Imm(asm.R3, size))
		g.emit(asm.Mov.Imm(asm.R4, []int32{0, 0, 1, 2, 4}[g.r.IntN(5)]))
		g.emit(asm.FnRingbufOutput.Call())
		g.emit(asm.LSh.Imm(asm.R7, 1), asm.Add.Reg(asm.R7, asm.R0))
		g.reinit(true)
		g.emit(asm.Sub.Imm(asm.R8, 1))
		g.jump(asm.JNE.Imm(asm.R8, 0, ""), top)
		g.counter = noReg
		g.alu(false)
	}
}
