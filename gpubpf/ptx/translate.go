package ptx

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/devmap"
)

// Options tunes Translate.
type Options struct {
	// Helpers is the PTX text of the helper library (.func definitions
	// named abi.FuncMap*). Its .version/.target/.address_size lines are
	// dropped and its .version/.target raise the manifest's minimums. ""
	// emits .extern declarations instead: the calls are there, the
	// functions are not (ptxinterp provides them natively).
	Helpers string
	// Harness also emits, per program, .entry __gpuext_harness_<prog>
	// (.param .u64 ctx, .param .u64 ret) (parameters named __hctx,
	// __hret): each thread runs the program with r1 = ctx and thread
	// (0,0,0) of block (0,0,0) stores r0 to *ret.
	Harness bool
	// FusedAdds: per program, the raw indices of loads that begin a load,
	// add, store of one shared map value (verifier.Result.FusedAdds): each
	// triple becomes one atomic add, which bpftime-style programs need to
	// count right when every thread runs them.
	FusedAdds map[string][]int
	// NoDefer keeps the entry's atomic adds at the entry in the inline
	// form (by default they wait for the exit: deferSet in inline.go).
	NoDefer bool
}

// Module is a translated probe module.
type Module struct {
	// PTX is the fragment the patcher splices: no .version/.target lines.
	PTX      string
	Manifest abi.Manifest
	// Guard[a]: every program of attach point a acts only in the thread
	// with linear id 0 of its block (LeaderOnly; vacuously true without
	// programs), so the patcher may let only that thread run it.
	Guard map[abi.Attach]bool
	// Inline[a] is the inline form of attach point a (inline.go): the
	// template the patcher pastes at the site instead of the call.
	Inline map[abi.Attach]string
}

// Minimum PTX ISA and target of the fragment without a helper library:
// generic 64-bit atom.and/or/xor and %globaltimer are older, but sm_70 is
// the oldest target the CUDA toolkits the runtime supports still build for,
// and sm_70 needs PTX 6.0.
// warpMinPTX is what a module with warpAdd's activemask needs.
const warpMinPTX = "6.2"

const (
	baseMinPTX    = "6.0"
	baseMinTarget = 70
)

// ErrUnsupported is wrapped by errors for eBPF the translator does not take.
var ErrUnsupported = errors.New("not supported on the device")

// HarnessPrefix names the harness entries: HarnessPrefix + program name.
const HarnessPrefix = "__gpuext_harness_"

// StackSize is the eBPF stack, a .local array per program call.
const StackSize = 512

var identRe = regexp.MustCompile(`[^A-Za-z0-9_]`)

// SymbolName is a PTX-safe form of a map or program name.
func SymbolName(name string) string { return identRe.ReplaceAllString(name, "_") }

// MapSymbol is the symbol of a map: abi.MapSymbolPrefix + name.
func MapSymbol(name string) string { return abi.MapSymbolPrefix + SymbolName(name) }

// ProgFunction is the function of a program.
func ProgFunction(name string) string { return abi.ProgFuncPrefix + SymbolName(name) }

// HarnessEntry is the harness .entry of a program.
func HarnessEntry(name string) string { return HarnessPrefix + SymbolName(name) }

// Translate translates progs (nil: every program, by name) of spec.
func Translate(spec *ebpf.CollectionSpec, progs []string, opt Options) (*Module, error) {
	if spec == nil {
		return nil, errors.New("translate: nil spec")
	}
	if progs == nil {
		for n := range spec.Programs {
			progs = append(progs, n)
		}
		sort.Strings(progs)
	}
	m := &Module{
		Manifest: abi.Manifest{Version: abi.ManifestVersion, MinPTX: baseMinPTX, MinTarget: baseMinTarget},
		Guard:    map[abi.Attach]bool{abi.KernelEntry: true, abi.KernelExit: true},
	}
	var funcs strings.Builder
	usedMaps := map[string]bool{}
	var mapOrder []string
	byAttach := map[abi.Attach][]string{}
	seenFn := map[string]string{}
	for _, name := range progs {
		ps, ok := spec.Programs[name]
		if !ok {
			return nil, fmt.Errorf("program %q: not in the collection", name)
		}
		fn := ProgFunction(name)
		if other, dup := seenFn[fn]; dup {
			return nil, fmt.Errorf("programs %q and %q: both map to %s", other, name, fn)
		}
		seenFn[fn] = name
		sec, _ := abi.ParseSection(ps.SectionName)
		t := &progTranslator{spec: spec, name: name, fn: fn, fused: fusedSet(opt.FusedAdds[name]), bt: sec.Bpftime}
		if err := t.translate(ps.Instructions); err != nil {
			return nil, fmt.Errorf("program %q: %w", name, err)
		}
		for _, mn := range t.maps {
			if !usedMaps[mn] {
				usedMaps[mn] = true
				mapOrder = append(mapOrder, mn)
			}
		}
		funcs.WriteString(t.out.String())
		if t.warp && versionLess(m.Manifest.MinPTX, warpMinPTX) {
			m.Manifest.MinPTX = warpMinPTX
		}
		pi := abi.ProgInfo{Name: name, Function: fn, Insns: t.insns}
		if sec, ok := abi.ParseSection(ps.SectionName); ok {
			a := sec.Attach
			pi.Attach = a.String()
			pi.Kernel = sec.Kernel
			byAttach[a] = append(byAttach[a], name)
			m.Guard[a] = m.Guard[a] && LeaderOnly(ps.Instructions)
		}
		m.Manifest.Programs = append(m.Manifest.Programs, pi)
	}
	sort.Strings(mapOrder)

	var b strings.Builder
	b.WriteString("// gpuext device probe module (generated by gpubpf/ptx; do not edit)\n\n")
	fmt.Fprintf(&b, ".visible .global .align 4 .u32 %s;\n", abi.SymTenantID)
	fmt.Fprintf(&b, ".visible .global .align 8 .u64 %s;\n", abi.SymLaunchNs)
	if usesHelper(spec, progs, abi.BtPidTgid) {
		fmt.Fprintf(&b, ".visible .global .align 8 .u64 %s;\n", abi.SymPidTgid)
	}
	for _, mn := range mapOrder {
		ms := spec.Maps[mn]
		im, err := devmap.MapImage(ms)
		if err != nil {
			return nil, err
		}
		sym := MapSymbol(mn)
		m.Manifest.Maps = append(m.Manifest.Maps, abi.MapInfo{Name: mn, Symbol: sym, Layout: im.Layout})
		writeGlobal(&b, sym, im.Bytes)
	}
	b.WriteString("\n")
	if opt.Helpers == "" {
		for _, h := range []string{abi.FuncMapLookup, abi.FuncMapDelete} {
			fmt.Fprintf(&b, ".extern .func (.param .b64 __r) %s(.param .b64 __p0, .param .b64 __p1);\n", h)
		}
		for _, h := range []string{abi.FuncMapUpdate, abi.FuncRingbufOut} {
			fmt.Fprintf(&b, ".extern .func (.param .b64 __r) %s(.param .b64 __p0, .param .b64 __p1, .param .b64 __p2, .param .b64 __p3);\n", h)
		}
	} else {
		body, ver, target := stripHeader(opt.Helpers)
		if ver != "" && versionLess(m.Manifest.MinPTX, ver) {
			m.Manifest.MinPTX = ver
		}
		if target > m.Manifest.MinTarget {
			m.Manifest.MinTarget = target
		}
		b.WriteString("// helper library\n")
		b.WriteString(body)
		if !strings.HasSuffix(body, "\n") {
			b.WriteString("\n")
		}
	}
	b.WriteString("\n")
	b.WriteString(funcs.String())
	writeDispatch(&b, spec, abi.FuncEntry, abi.KernelEntry, byAttach[abi.KernelEntry])
	writeDispatch(&b, spec, abi.FuncExit, abi.KernelExit, byAttach[abi.KernelExit])
	m.Inline = map[abi.Attach]string{}
	var all []string
	for _, a := range []abi.Attach{abi.KernelEntry, abi.KernelExit} {
		all = append(all, byAttach[a]...)
	}
	blockSlot := atomicOnlyMaps(spec, all, opt.FusedAdds)
	// The block's slot is computed once, in the entry block, into a
	// register of the kernel the exit block reads (ptxas would read the
	// block index again at the exit, on the exiting thread's path).
	shared := len(blockSlot) > 0 && len(byAttach[abi.KernelEntry]) > 0
	// The entry's counts wait for the exit (deferSet) when one thread, thread
	// 0 of the block, runs both sites.
	var dfr *deferSet
	if shared && m.Guard[abi.KernelEntry] && m.Guard[abi.KernelExit] && len(byAttach[abi.KernelExit]) > 0 && !opt.NoDefer {
		dfr = newDeferSet()
	}
	for _, a := range []abi.Attach{abi.KernelEntry, abi.KernelExit} {
		in, err := inlineAttach(spec, a, byAttach[a], m.Guard[a], blockSlot, shared, m.Guard[abi.KernelEntry], opt.FusedAdds, dfr)
		if err != nil {
			return nil, err
		}
		m.Inline[a] = in
	}
	if opt.Harness {
		for _, name := range progs {
			writeHarness(&b, name)
		}
	}
	m.PTX = b.String()
	return m, nil
}

// Standalone is the fragment as a module of its own.
func (m *Module) Standalone(ptxVersion string, target int) string {
	return fmt.Sprintf(".version %s\n.target sm_%d\n.address_size 64\n\n", ptxVersion, target) + m.PTX
}

func writeGlobal(b *strings.Builder, sym string, img []byte) {
	last := len(img)
	for last > 0 && img[last-1] == 0 {
		last--
	}
	fmt.Fprintf(b, ".visible .global .align 8 .b8 %s[%d]", sym, len(img))
	if last > 0 {
		b.WriteString(" = {")
		for i := 0; i < last; i++ {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(strconv.Itoa(int(img[i])))
		}
		b.WriteString("}")
	}
	b.WriteString(";\n")
}

var (
	versionRe = regexp.MustCompile(`^\s*\.version\s+([0-9]+\.[0-9]+)`)
	targetRe  = regexp.MustCompile(`^\s*\.target\s+sm_([0-9]+)`)
	addrRe    = regexp.MustCompile(`^\s*\.address_size\b`)
)

func stripHeader(s string) (body, version string, target int) {
	var out []string
	for _, ln := range strings.Split(s, "\n") {
		if mm := versionRe.FindStringSubmatch(ln); mm != nil {
			version = mm[1]
			continue
		}
		if mm := targetRe.FindStringSubmatch(ln); mm != nil {
			target, _ = strconv.Atoi(mm[1])
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(ln), ".target") || addrRe.MatchString(ln) {
			continue
		}
		out = append(out, ln)
	}
	return strings.Join(out, "\n"), version, target
}

func versionLess(a, b string) bool {
	pa := strings.SplitN(a, ".", 2)
	pb := strings.SplitN(b, ".", 2)
	ma, _ := strconv.Atoi(pa[0])
	mb, _ := strconv.Atoi(pb[0])
	if ma != mb {
		return ma < mb
	}
	na, nb := 0, 0
	if len(pa) > 1 {
		na, _ = strconv.Atoi(pa[1])
	}
	if len(pb) > 1 {
		nb, _ = strconv.Atoi(pb[1])
	}
	return na < nb
}

// writeCtx builds a program context in the .local array ctx (kernel id,
// tenant id, attach point, launch time) through the registers <d>0..2
// (.b64) and <e>0..1 (.b32): kidInsn puts the kernel id in <d>0, and
// <d>2 ends up holding the context's generic address. The dispatch and the
// inline form build it the same way.
func writeCtx(b *strings.Builder, ctx, d, e, kidInsn string, a abi.Attach) {
	fmt.Fprintf(b, "\t%s;\n\tst.local.u64 [%s], %s0;\n", kidInsn, ctx, d)
	fmt.Fprintf(b, "\tld.global.u32 %s0, [%s];\n\tst.local.u32 [%s+8], %s0;\n", e, abi.SymTenantID, ctx, e)
	fmt.Fprintf(b, "\tmov.u32 %s1, %d;\n\tst.local.u32 [%s+12], %s1;\n", e, uint32(a), ctx, e)
	fmt.Fprintf(b, "\tld.global.u64 %s1, [%s];\n\tst.local.u64 [%s+16], %s1;\n", d, abi.SymLaunchNs, ctx, d)
	fmt.Fprintf(b, "\tmov.u64 %s2, %s;\n\tcvta.local.u64 %s2, %s2;\n", d, ctx, d, d)
}

func writeDispatch(b *strings.Builder, spec *ebpf.CollectionSpec, fn string, a abi.Attach, progs []string) {
	fmt.Fprintf(b, ".visible .func %s(.param .b64 kernel_id)\n{\n", fn)
	b.WriteString("\t.local .align 8 .b8 __pctx[24];\n\t.reg .b64 %d<3>;\n\t.reg .b32 %e<2>;\n")
	for _, p := range progs {
		if programKernel(spec, p) != "" {
			b.WriteString("\t.reg .pred %dq;\n")
			break
		}
	}
	writeCtx(b, "__pctx", "%d", "%e", "ld.param.u64 %d0, [kernel_id]", a)
	for i, p := range progs {
		// a program of a kprobe/KERNEL section runs in that kernel only
		k := programKernel(spec, p)
		if k != "" {
			fmt.Fprintf(b, "\t// %s: only in %s\n\tsetp.ne.u64 %%dq, %%d0, %s;\n\t@%%dq bra $L__skip%d;\n", p, k, kernelIDLit(k), i)
		}
		writeCall(b, ProgFunction(p), "%d2", "%d1")
		if k != "" {
			fmt.Fprintf(b, "$L__skip%d:\n", i)
		}
	}
	b.WriteString("\tret;\n}\n\n")
}

// programKernel is the .entry a program's section limits it to ("" = any).
func programKernel(spec *ebpf.CollectionSpec, name string) string {
	if ps := spec.Programs[name]; ps != nil {
		if sec, ok := abi.ParseSection(ps.SectionName); ok {
			return sec.Kernel
		}
	}
	return ""
}

// kernelIDLit is a kernel's id (abi.KernelID) as a PTX literal.
func kernelIDLit(entry string) string { return fmt.Sprintf("0x%016xU", abi.KernelID(entry)) }

// usesHelper: some program of progs calls helper id.
func usesHelper(spec *ebpf.CollectionSpec, progs []string, id int64) bool {
	for _, n := range progs {
		if ps := spec.Programs[n]; ps != nil {
			for _, ins := range ps.Instructions {
				if ins.IsBuiltinCall() && ins.Constant == id {
					return true
				}
			}
		}
	}
	return false
}

func fusedSet(loads []int) map[int]bool {
	if len(loads) == 0 {
		return nil
	}
	m := map[int]bool{}
	for _, l := range loads {
		m[l] = true
	}
	return m
}

func writeCall(b *strings.Builder, fn, arg, ret string) {
	b.WriteString("\t{\n\t.param .b64 __a0;\n\t.param .b64 __rv;\n")
	fmt.Fprintf(b, "\tst.param.b64 [__a0], %s;\n\tcall (__rv), %s, (__a0);\n\tld.param.b64 %s, [__rv];\n\t}\n", arg, fn, ret)
}

func writeHarness(b *strings.Builder, name string) {
	fmt.Fprintf(b, ".visible .entry %s(.param .u64 __hctx, .param .u64 __hret)\n{\n", HarnessEntry(name))
	b.WriteString("\t.reg .b64 %d<3>;\n\t.reg .b32 %e<3>;\n\t.reg .pred %q;\n")
	b.WriteString("\tld.param.u64 %d0, [__hctx];\n")
	writeCall(b, ProgFunction(name), "%d0", "%d1")
	b.WriteString("\tmov.u32 %e0, %tid.x;\n\tmov.u32 %e1, %ctaid.x;\n\tor.b32 %e0, %e0, %e1;\n")
	b.WriteString("\tmov.u32 %e1, %tid.y;\n\tor.b32 %e0, %e0, %e1;\n\tmov.u32 %e1, %tid.z;\n\tor.b32 %e0, %e0, %e1;\n")
	b.WriteString("\tmov.u32 %e1, %ctaid.y;\n\tor.b32 %e0, %e0, %e1;\n\tmov.u32 %e1, %ctaid.z;\n\tor.b32 %e0, %e0, %e1;\n")
	b.WriteString("\tsetp.ne.u32 %q, %e0, 0;\n\t@%q bra $L__done;\n")
	b.WriteString("\tld.param.u64 %d2, [__hret];\n\tst.u64 [%d2], %d1;\n$L__done:\n\tret;\n}\n\n")
}
