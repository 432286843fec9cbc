package ptx_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/devmap"
	"github.com/gpuext/gpuext/gpubpf/ptx"
	"github.com/gpuext/gpuext/gpubpf/ptxinterp"
)

func TestGoldenInline(t *testing.T) {
	m, err := ptx.Translate(counterSpec(), nil, ptx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "counter_inline_entry.ptx", m.Inline[abi.KernelEntry])
	golden(t, "counter_inline_exit.ptx", m.Inline[abi.KernelExit])
	// count_launch: the ARRAY lookup is address arithmetic; record_exit: the hash update stays a call
	if e := m.Inline[abi.KernelEntry]; strings.Contains(e, abi.FuncMapLookup) || !strings.Contains(e, "map_lookup_elem(launches) inline") {
		t.Errorf("entry: the launches lookup is not inline")
	}
	if x := m.Inline[abi.KernelExit]; !strings.Contains(x, "call (__hr), "+abi.FuncMapUpdate) {
		t.Errorf("exit: the hash update should call the helper library")
	}
	if !m.Guard[abi.KernelEntry] || m.Guard[abi.KernelExit] {
		t.Errorf("guard = %v, want entry only (record_exit runs in every thread)", m.Guard)
	}
}

// inlineKernel wraps a module's inline forms in an .entry the way the
// patcher does: declarations hoisted, the entry block, the exit block.
func inlineKernel(m *ptx.Module, site int, kid uint64) string {
	sub := strings.NewReplacer(ptx.InlineSite, strconv.Itoa(site), ptx.InlineKernelID, fmt.Sprintf("0x%016xU", kid))
	split := func(s string) (decls, block string) {
		i := strings.Index(s, "\n{\n")
		if strings.HasPrefix(s, "{\n") {
			return "", s
		}
		return s[:i+1], s[i+1:]
	}
	// the site guard (module.conf guard_* thread0): only thread 0 of the block runs the block
	guard := func(a abi.Attach, block string) string {
		if !m.Guard[a] {
			return block
		}
		skip := "$__guard_skip_" + a.String()
		return "{\n\t.reg .b32 %__g<3>;\n\t.reg .pred %__gp;\n" +
			"\tmov.u32 %__g0, %tid.x;\n\tmov.u32 %__g1, %tid.y;\n\tor.b32 %__g0, %__g0, %__g1;\n" +
			"\tmov.u32 %__g2, %tid.z;\n\tor.b32 %__g0, %__g0, %__g2;\n" +
			"\tsetp.ne.u32 %__gp, %__g0, 0;\n\t@%__gp bra " + skip + ";\n" + block + skip + ":\n}\n"
	}
	de, be := split(sub.Replace(m.Inline[abi.KernelEntry]))
	dx, bx := split(sub.Replace(m.Inline[abi.KernelExit]))
	return m.Standalone("7.0", 70) + ".visible .entry __k()\n{\n" + de + dx + guard(abi.KernelEntry, be) + guard(abi.KernelExit, bx) + "\tret;\n}\n"
}

// runBoth runs a grid through the dispatch functions and through the inline
// blocks, on fresh copies of the module, and returns each form's map bytes.
func runBoth(t *testing.T, m *ptx.Module, blocks, threads uint32) (call, inline map[string][]byte) {
	t.Helper()
	kid := abi.KernelID("k")
	run := func(inl bool) map[string][]byte {
		src := m.Standalone("7.0", 70)
		if inl {
			src = inlineKernel(m, 3, kid)
		}
		vm, err := ptxinterp.Load(src)
		if err != nil {
			t.Fatalf("inline=%v: %v", inl, err)
		}
		for b := uint32(0); b < blocks; b++ {
			for tid := uint32(0); tid < threads; tid++ {
				th := ptxinterp.ThreadRegs{Tid: [3]uint32{tid}, Ctaid: [3]uint32{b}, Ntid: [3]uint32{threads, 1, 1},
					Nctaid: [3]uint32{blocks, 1, 1}, LaneID: tid % 32, WarpID: tid / 32, SMID: b, Globaltimer: 100 + uint64(b)}
				if inl {
					if _, err := vm.Call("__k", th); err != nil {
						t.Fatalf("inline: %v", err)
					}
					continue
				}
				for _, fn := range []string{abi.FuncEntry, abi.FuncExit} {
					if _, err := vm.Call(fn, th, kid); err != nil {
						t.Fatalf("%s: %v", fn, err)
					}
				}
			}
		}
		out := map[string][]byte{}
		for _, mi := range m.Manifest.Maps {
			out[mi.Name] = bytes.Clone(vm.Global(mi.Symbol))
		}
		return out
	}
	return run(false), run(true)
}

func TestInlineMatchesDispatch(t *testing.T) {
	m, err := ptx.Translate(counterSpec(), nil, ptx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	call, inl := runBoth(t, m, 2, 3)
	for name, want := range call {
		if !bytes.Equal(inl[name], want) {
			t.Errorf("map %s: inline form differs from the dispatch", name)
		}
	}
}

// Inline lookups of ARRAY and PER_WARP maps agree with the helper library
// for keys in and out of range, aligned and not, and a lookup whose map is
// not known at the call (two maps reach it) stays a call.
func TestInlineLookups(t *testing.T) {
	bump := func(m string, keyOff int16, key int64, label string) asm.Instructions {
		st := asm.Instructions{asm.StoreImm(asm.RFP, keyOff, key, asm.Word)}
		if keyOff%4 != 0 { // a misaligned key, written byte by byte
			st = nil
			for b := int16(0); b < 4; b++ {
				st = append(st, asm.StoreImm(asm.RFP, keyOff+b, key>>(8*b)&0xff, asm.Byte))
			}
		}
		return append(st, asm.Instructions{
			asm.LoadMapPtr(asm.R1, 0).WithReference(m),
			asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, int32(keyOff)),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, label),
			asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord), asm.Add.Imm(asm.R1, 1), asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 0).WithSymbol(label),
		}...)
	}
	var prog asm.Instructions
	for i, c := range []struct {
		m   string
		off int16
		key int64
	}{{"arr", -4, 2}, {"arr", -8, 3}, {"arr", -12, 9}, {"pw", -4, 1}, {"pw", -7, 2}, {"pw", -16, 5}, {"arr", -23, 0}} {
		prog = append(prog, bump(c.m, c.off, c.key, fmt.Sprintf("l%d", i))...)
	}
	// r1 is arr or pw depending on the thread: not known statically at the call
	prog = append(prog,
		asm.StoreImm(asm.RFP, -4, 1, asm.Word),
		asm.BuiltinFunc(abi.HelperThreadLinearID).Call(),
		asm.LoadMapPtr(asm.R1, 0).WithReference("arr"),
		asm.JEq.Imm(asm.R0, 0, "same"),
		asm.LoadMapPtr(asm.R1, 0).WithReference("pw"),
		asm.Mov.Reg(asm.R2, asm.RFP).WithSymbol("same"), asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "end"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord), asm.Add.Imm(asm.R1, 1), asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("end"),
		asm.Return(),
	)
	spec := &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			"arr": {Name: "arr", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 4},
			"pw":  {Name: "pw", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 3},
		},
		Programs: map[string]*ebpf.ProgramSpec{"p": {Name: "p", SectionName: abi.SecKernelEntry, Instructions: prog}},
	}
	m, err := ptx.Translate(spec, nil, ptx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := m.Inline[abi.KernelEntry]
	if n := strings.Count(e, "inline\n"); n != 7 {
		t.Errorf("%d inline lookups, want 7", n)
	}
	if n := strings.Count(e, "call (__hr), "+abi.FuncMapLookup); n != 1 {
		t.Errorf("%d lookup calls, want 1 (the map is not known there)", n)
	}
	if !strings.Contains(e, "ld.u8 ") {
		t.Errorf("misaligned keys should load byte by byte")
	}
	call, inl := runBoth(t, m, 3, 40)
	for name, want := range call {
		if !bytes.Equal(inl[name], want) {
			t.Errorf("map %s: inline form differs from the helper library", name)
		}
	}
	// the counts are there at all: arr[2], arr[3] and arr[0] by every thread (3 x 40)
	arr := devmap.Image{Layout: m.Manifest.Maps[0].Layout, Bytes: inl["arr"]}
	ents, _ := arr.Entries()
	if got := fmt.Sprint(ents); !strings.Contains(got, "[120 0 0 0 0 0 0 0]") {
		t.Errorf("arr = %v", got)
	}
}

// A per-warp map updated only by atomics on the looked-up value takes the
// block's slot in the inline form (no %smid/%warpid reads); one written with
// a plain store keeps the warp's slot, which a warp owns while it runs. The
// sums (what the host reads) are the same either way, and equal the call
// form's, over 3 blocks x 40 threads.
func TestInlinePerWarpSlots(t *testing.T) {
	bump := func(m string, atomic bool, label string) asm.Instructions {
		upd := asm.Instructions{asm.Mov.Imm(asm.R1, 1), asm.AddAtomic.Mem(asm.R0, asm.R1, asm.DWord, 0)}
		if !atomic {
			upd = asm.Instructions{asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord), asm.Add.Imm(asm.R1, 1), asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord)}
		}
		return append(append(asm.Instructions{
			asm.StoreImm(asm.RFP, -4, 1, asm.Word),
			asm.LoadMapPtr(asm.R1, 0).WithReference(m),
			asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, label),
		}, upd...), asm.Mov.Imm(asm.R0, 0).WithSymbol(label))
	}
	prog := append(bump("atom", true, "a"), bump("plain", false, "b")...)
	prog = append(prog, asm.Return())
	spec := &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			"atom":  {Name: "atom", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 2},
			"plain": {Name: "plain", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 2},
		},
		Programs: map[string]*ebpf.ProgramSpec{"p": {Name: "p", SectionName: abi.SecKernelEntry, Instructions: prog}},
	}
	m, err := ptx.Translate(spec, nil, ptx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := m.Inline[abi.KernelEntry]
	if !strings.Contains(e, "mov.u32 %__gxw1, "+ptx.SharedSlotReg) || !strings.Contains(e, "mov.u32 %__gxw1, %__gxslot") {
		t.Fatalf("want the block's slot for atom and the warp's for plain:\n%s", e)
	}
	// the block's slot: declared at kernel scope and set once by the entry block
	if strings.Count(e, ".reg .b32 "+ptx.SharedSlotReg+";") != 1 || strings.Count(e, "mad.lo.u32 "+ptx.SharedSlotReg) != 1 ||
		strings.Count(e, "%smid") != 1 {
		t.Errorf("each slot register set once:\n%s", e)
	}
	call, inl := runBoth(t, m, 3, 40)
	for i, mi := range m.Manifest.Maps {
		sum := func(b []byte) string {
			ents, err := (&devmap.Image{Layout: m.Manifest.Maps[i].Layout, Bytes: b}).Entries()
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprint(ents)
		}
		if got, want := sum(inl[mi.Name]), sum(call[mi.Name]); got != want || !strings.Contains(got, "[120 0 0 0 0 0 0 0]") {
			t.Errorf("map %s: inline sums %s, call form %s, want 120 at key 1", mi.Name, got, want)
		}
	}
}

// Only a plain atomic add sums the same in any slot: an exchange, an or, or
// a fetch-add whose old value the program adds back each see the slot's
// other writers, so their per-warp maps keep the warp's slot (a warp owns
// it while it runs) and the inline form gives what the call form gives.
func TestInlineOtherAtomicsKeepTheWarpSlot(t *testing.T) {
	for name, upd := range map[string]asm.Instructions{
		"xchg": {asm.Mov.Imm(asm.R1, 7), asm.Xchg.Mem(asm.R0, asm.R1, asm.DWord, 0)},
		"or":   {asm.Mov.Imm(asm.R1, 3), asm.OrAtomic.Mem(asm.R0, asm.R1, asm.DWord, 0), asm.Mov.Imm(asm.R1, 1), asm.AddAtomic.Mem(asm.R0, asm.R1, asm.DWord, 0)},
		"fetch-add used": {asm.Mov.Imm(asm.R1, 1), asm.FetchAdd.Mem(asm.R0, asm.R1, asm.DWord, 0),
			asm.AddAtomic.Mem(asm.R0, asm.R1, asm.DWord, 0)},
	} {
		prog := append(asm.Instructions{
			asm.StoreImm(asm.RFP, -4, 1, asm.Word),
			asm.LoadMapPtr(asm.R1, 0).WithReference("pw"),
			asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
		}, upd...)
		prog = append(prog, asm.Mov.Imm(asm.R0, 0).WithSymbol("out"), asm.Return())
		spec := &ebpf.CollectionSpec{
			Maps:     map[string]*ebpf.MapSpec{"pw": {Name: "pw", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 2}},
			Programs: map[string]*ebpf.ProgramSpec{"p": {Name: "p", SectionName: abi.SecKernelEntry, Instructions: prog}},
		}
		m, err := ptx.Translate(spec, nil, ptx.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if e := m.Inline[abi.KernelEntry]; strings.Contains(e, ptx.SharedSlotReg) || !strings.Contains(e, "%__gxslot") {
			t.Errorf("%s: the inline form should take the warp's slot:\n%s", name, e)
		}
		call, inl := runBoth(t, m, 3, 40)
		if !bytes.Equal(inl["pw"], call["pw"]) {
			t.Errorf("%s: the inline form's map differs from the call form's", name)
		}
	}
}

// The entry block sets the block's slot register in thread 0 only when it
// runs under the thread-0 guard; an exit block that runs in every thread
// must not read it there (never set in the other threads) and computes its
// own slot.
func TestInlineUnguardedExitComputesItsOwnSlot(t *testing.T) {
	add := func(label string) asm.Instructions {
		return asm.Instructions{
			asm.StoreImm(asm.RFP, -4, 0, asm.Word),
			asm.LoadMapPtr(asm.R1, 0).WithReference("pw"),
			asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, label),
			asm.Mov.Imm(asm.R1, 1), asm.AddAtomic.Mem(asm.R0, asm.R1, asm.DWord, 0),
			asm.Mov.Imm(asm.R0, 0).WithSymbol(label), asm.Return(),
		}
	}
	entry := append(asm.Instructions{
		asm.BuiltinFunc(abi.HelperThreadLinearID).Call(),
		asm.JNE.Imm(asm.R0, 0, "e"),
	}, add("e")...)
	spec := &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{"pw": {Name: "pw", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1}},
		Programs: map[string]*ebpf.ProgramSpec{
			"in":  {Name: "in", SectionName: abi.SecKernelEntry, Instructions: entry},
			"out": {Name: "out", SectionName: abi.SecKernelExit, Instructions: add("x")},
		},
	}
	m, err := ptx.Translate(spec, nil, ptx.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !m.Guard[abi.KernelEntry] || m.Guard[abi.KernelExit] {
		t.Fatalf("want a guarded entry and an unguarded exit, got %v", m.Guard)
	}
	if x := m.Inline[abi.KernelExit]; strings.Contains(x, ptx.SharedSlotReg) {
		t.Errorf("the unguarded exit reads the entry's slot register:\n%s", x)
	}
	call, inl := runBoth(t, m, 3, 40)
	sum := func(b []byte) string {
		ents, err := (&devmap.Image{Layout: m.Manifest.Maps[0].Layout, Bytes: b}).Entries()
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(ents)
	}
	// 3 entries (thread 0 of each block) + 120 exits
	if got, want := sum(inl["pw"]), sum(call["pw"]); got != want || !strings.Contains(got, "[123 0 0 0 0 0 0 0]") {
		t.Errorf("inline sums %s, call form %s, want 123", got, want)
	}
}

// The entry's counts that wait for the exit (deferSet): under the thread-0
// guard at both sites, an entry add on every path to a block-slot element
// goes out with the exit's add to it (through a register copy of the
// address, as clang leaves it) or at the end of the exit block; one after an
// undecided branch (block 0 only) stays at the entry. The sums are the call
// form's, key by key, and NoDefer leaves every add where the program has it.
func TestInlineDeferredCounts(t *testing.T) {
	lookup := func(key int32, dst asm.Register, out string) asm.Instructions {
		return asm.Instructions{
			asm.StoreImm(asm.RFP, -4, int64(key), asm.Word),
			asm.LoadMapPtr(asm.R1, 0).WithReference("cnt"),
			asm.Mov.Reg(asm.R2, asm.RFP), asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.Mov.Reg(dst, asm.R0),
			asm.JEq.Imm(dst, 0, out),
		}
	}
	add := func(dst asm.Register, n int32) asm.Instructions {
		return asm.Instructions{asm.Mov.Imm(asm.R1, n), asm.AddAtomic.Mem(dst, asm.R1, asm.DWord, 0)}
	}
	leader := asm.Instructions{asm.BuiltinFunc(abi.HelperThreadLinearID).Call(), asm.JNE.Imm(asm.R0, 0, "out")}
	var entry, exit asm.Instructions
	entry = append(entry, leader...)
	entry = append(append(entry, lookup(0, asm.R0, "out")...), add(asm.R0, 5)...) // merged with the exit's
	entry = append(append(entry, lookup(1, asm.R6, "out")...), add(asm.R6, 7)...) // left for the flush
	entry = append(entry, asm.BuiltinFunc(abi.HelperBlockLinearID).Call(), asm.JNE.Imm(asm.R0, 0, "out"))
	entry = append(append(entry, lookup(2, asm.R0, "out")...), add(asm.R0, 1)...) // block 0 only: at entry
	entry = append(entry, asm.Mov.Imm(asm.R0, 0).WithSymbol("out"), asm.Return())
	exit = append(exit, leader...)
	exit = append(append(exit, lookup(0, asm.R6, "out")...), add(asm.R6, 3)...)
	exit = append(append(exit, lookup(3, asm.R0, "out")...), add(asm.R0, 1)...)
	exit = append(exit, asm.Mov.Imm(asm.R0, 0).WithSymbol("out"), asm.Return())
	spec := &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{"cnt": {Name: "cnt", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 4}},
		Programs: map[string]*ebpf.ProgramSpec{
			"e": {Name: "e", SectionName: abi.SecKernelEntry, Instructions: entry},
			"x": {Name: "x", SectionName: abi.SecKernelExit, Instructions: exit},
		},
	}
	const blocks, threads = 3, 40
	for _, noDefer := range []bool{false, true} {
		m, err := ptx.Translate(spec, nil, ptx.Options{NoDefer: noDefer})
		if err != nil {
			t.Fatal(err)
		}
		if !m.Guard[abi.KernelEntry] || !m.Guard[abi.KernelExit] {
			t.Fatalf("guard = %v, want both sites", m.Guard)
		}
		e, x := m.Inline[abi.KernelEntry], m.Inline[abi.KernelExit]
		wantEntryRed, wantDeferred := 1, 2
		if noDefer {
			wantEntryRed, wantDeferred = 3, 0
		}
		if got := strings.Count(e, "red.global"); got != wantEntryRed {
			t.Errorf("noDefer=%v: entry has %d red.global, want %d\n%s", noDefer, got, wantEntryRed, e)
		}
		if got := strings.Count(e, "deferred to the exit"); got != wantDeferred {
			t.Errorf("noDefer=%v: %d deferred adds, want %d\n%s", noDefer, got, wantDeferred, e)
		}
		// key 0 goes out with the exit's add; only key 1 is left for the flush
		if !noDefer && (!strings.Contains(x, "mov.u64 %__gxd"+ptx.InlineSite+"_0, 0;") ||
			strings.Contains(x, "red.global.add.u64 [%__gxt1], %__gxd"+ptx.InlineSite+"_0") ||
			!strings.Contains(x, "@%__gxp0 red.global.add.u64 [%__gxt1], %__gxd"+ptx.InlineSite+"_1")) {
			t.Errorf("exit: want key 0 merged and key 1 flushed\n%s", x)
		}
		call, inl := runBoth(t, m, blocks, threads)
		ents := func(b []byte) []uint64 {
			v, err := (&devmap.Image{Layout: m.Manifest.Maps[0].Layout, Bytes: b}).Entries()
			if err != nil {
				t.Fatal(err)
			}
			var out []uint64
			for _, e := range v {
				out = append(out, binary.LittleEndian.Uint64(e.Value))
			}
			return out
		}
		want := fmt.Sprint([]uint64{8 * blocks, 7 * blocks, 1, blocks})
		if got, ref := fmt.Sprint(ents(inl["cnt"])), fmt.Sprint(ents(call["cnt"])); got != want || ref != want {
			t.Errorf("noDefer=%v: inline %s, call form %s, want %s", noDefer, got, ref, want)
		}
	}
}
