package difftest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/devmap"
	"github.com/gpuext/gpuext/gpubpf/ptx"
	"github.com/gpuext/gpuext/gpubpf/ptxinterp"
)

// Expect is one program of the GPU corpus (corpus.txt) with what the
// kernel's run left behind.
type Expect struct {
	Name   string // case name; also the program name in the combined module
	Entry  string // harness .entry
	Ctx    []byte // ctx before the run
	R0     uint32 // low 32 bits of r0 (all BPF_PROG_TEST_RUN reports)
	CtxOut []byte // ctx after the kernel's run (ctx[0:8] holds the full r0)
	Maps   []MapExpect
}

// MapExpect is one map of a corpus program.
type MapExpect struct {
	Symbol string
	Init   []byte // the symbol's bytes before the run: descriptor + data
	// Entries: the kernel's map contents after the run, in the form the
	// device image decodes to (devmap.Image.Entries): "key:value" hex pairs
	// ordered by key, space separated.
	Entries string
	// Image: the symbol's bytes after the run in ptxinterp, i.e. per the
	// executable device map spec (seq words, bucket positions included).
	Image []byte
}

// Combined is every case in one collection: program <case name>, maps
// <case name>_<map>, so one module holds the whole corpus.
func Combined(cases []Case) (*ebpf.CollectionSpec, []string) {
	spec := &ebpf.CollectionSpec{Maps: map[string]*ebpf.MapSpec{}, Programs: map[string]*ebpf.ProgramSpec{}}
	var names []string
	for _, c := range cases {
		for n, ms := range c.Spec.Maps {
			cp := ms.Copy()
			cp.Name = c.Name + "_" + n
			spec.Maps[cp.Name] = cp
		}
		ps := c.Spec.Programs[ProgName].Copy()
		ps.Name = c.Name
		for i := range ps.Instructions {
			ins := &ps.Instructions[i]
			if ins.IsLoadFromMap() {
				*ins = ins.WithReference(c.Name + "_" + ins.Reference())
			}
		}
		spec.Programs[c.Name] = ps
		names = append(names, c.Name)
	}
	return spec, names
}

// BuildCorpus runs every case in the kernel and in ptxinterp (they must
// agree) and returns the combined module, standalone with helpers (the
// helper library's PTX text; "" leaves the helpers to ptxinterp), and the
// expectations. It needs root.
func BuildCorpus(cases []Case, helpers string) (string, []Expect, error) {
	var exp []Expect
	for _, c := range cases {
		k, err := RunKernel(c)
		if err != nil {
			return "", nil, err
		}
		d, err := runDeviceImages(c)
		if err != nil {
			return "", nil, err
		}
		if diffs := Compare(k, d.Result); len(diffs) > 0 {
			return "", nil, fmt.Errorf("%s: kernel and ptxinterp differ: %v", c.Name, diffs)
		}
		e := Expect{Name: c.Name, Entry: ptx.HarnessEntry(c.Name), Ctx: c.Ctx, R0: uint32(k.R0), CtxOut: k.Ctx}
		for _, n := range sortedMaps(c.Spec) {
			img, ok := d.images[n]
			if !ok {
				continue // not referenced by the program: not in the module
			}
			init, err := devmap.MapImage(c.Spec.Maps[n])
			if err != nil {
				return "", nil, err
			}
			e.Maps = append(e.Maps, MapExpect{
				Symbol:  ptx.MapSymbol(c.Name + "_" + n),
				Init:    init.Bytes,
				Entries: fmtEntries(k.Maps[n]),
				Image:   img,
			})
		}
		exp = append(exp, e)
	}
	spec, names := Combined(cases)
	m, err := ptx.Translate(spec, names, ptx.Options{Helpers: helpers, Harness: true})
	if err != nil {
		return "", nil, err
	}
	return m.Standalone(m.Manifest.MinPTX, m.Manifest.MinTarget), exp, nil
}

type deviceRun struct {
	Result
	images map[string][]byte
}

func runDeviceImages(c Case) (*deviceRun, error) {
	d, err := Translate(c)
	if err != nil {
		return nil, err
	}
	vm, err := ptxinterp.Load(d.Module.Standalone("7.0", 70))
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", c.Name, err)
	}
	r, err := runEntry(vm, d.Entry, c.Ctx)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", c.Name, err)
	}
	out := &deviceRun{Result: r, images: map[string][]byte{}}
	out.Maps = map[string][]devmap.Entry{}
	for _, mi := range d.Module.Manifest.Maps {
		img := bytes.Clone(vm.Global(mi.Symbol))
		ents, err := (&devmap.Image{Layout: mi.Layout, Bytes: img}).Entries()
		if err != nil {
			return nil, fmt.Errorf("decode %s: %w", mi.Symbol, err)
		}
		out.Maps[mi.Name] = ents
		out.images[mi.Name] = img
	}
	return out, nil
}

func runEntry(vm *ptxinterp.Machine, entry string, ctxIn []byte) (Result, error) {
	ctx := vm.Alloc(ctxIn)
	ret := vm.Alloc(make([]byte, 8))
	if _, err := vm.Call(entry, ptxinterp.Thread0(), ctx, ret); err != nil {
		return Result{}, err
	}
	r, err := vm.Read(ret, 8)
	if err != nil {
		return Result{}, err
	}
	c, err := vm.Read(ctx, len(ctxIn))
	if err != nil {
		return Result{}, err
	}
	return Result{R0: binary.LittleEndian.Uint64(r), Ctx: c}, nil
}

// CorpusHeader opens corpus.txt.
const CorpusHeader = "# gpuext probe corpus v1"

// WriteCorpus writes corpus.txt: per program
//
//	prog NAME ENTRY
//	ctx HEX
//	r0 HEX32
//	ctxout HEX
//	map SYMBOL LEN OFF:HEX...        (initial bytes: LEN, zero but for the runs)
//	expect SYMBOL N KEY:VALUE...     (N entries; hex; ordered by key)
//	image SYMBOL LEN OFF:HEX...      (bytes after the run per the device map spec)
//	end
//
// Map bytes are sparse (a per-warp map is megabytes of zeros): LEN bytes,
// zero except for the listed runs, OFF in decimal.
func WriteCorpus(w io.Writer, exp []Expect) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%s\n# %d programs; see gpubpf/difftest/gpucorpus.go\n", CorpusHeader, len(exp))
	for _, e := range exp {
		fmt.Fprintf(bw, "prog %s %s\nctx %x\nr0 %08x\nctxout %x\n", e.Name, e.Entry, e.Ctx, e.R0, e.CtxOut)
		for _, m := range e.Maps {
			n := 0
			if m.Entries != "" {
				n = len(strings.Fields(m.Entries))
			}
			fmt.Fprintf(bw, "map %s %s\nexpect %s %d %s\nimage %s %s\n", m.Symbol, sparse(m.Init), m.Symbol, n, m.Entries, m.Symbol, sparse(m.Image))
		}
		fmt.Fprintf(bw, "end\n")
	}
	return bw.Flush()
}

// ParseCorpus reads corpus.txt.
func ParseCorpus(r io.Reader) ([]Expect, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	var out []Expect
	var cur *Expect
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		bad := func(err error) error { return fmt.Errorf("corpus line %d: %w", line, err) }
		hx := func(s string) []byte {
			b, err := hex.DecodeString(s)
			if err != nil && cur != nil {
				cur.Name = "" // poison
			}
			return b
		}
		if f[0] != "prog" && cur == nil {
			return nil, bad(fmt.Errorf("%s outside a prog", f[0]))
		}
		switch {
		case f[0] == "prog" && len(f) == 3:
			out = append(out, Expect{Name: f[1], Entry: f[2]})
			cur = &out[len(out)-1]
		case f[0] == "ctx" && len(f) == 2:
			cur.Ctx = hx(f[1])
		case f[0] == "ctxout" && len(f) == 2:
			cur.CtxOut = hx(f[1])
		case f[0] == "r0" && len(f) == 2:
			v, err := strconv.ParseUint(f[1], 16, 32)
			if err != nil {
				return nil, bad(err)
			}
			cur.R0 = uint32(v)
		case f[0] == "map" && len(f) >= 3:
			b, err := unsparse(f[2:])
			if err != nil {
				return nil, bad(err)
			}
			cur.Maps = append(cur.Maps, MapExpect{Symbol: f[1], Init: b})
		case (f[0] == "expect" && len(f) >= 3) || (f[0] == "image" && len(f) >= 3):
			if len(cur.Maps) == 0 || cur.Maps[len(cur.Maps)-1].Symbol != f[1] {
				return nil, bad(fmt.Errorf("%s %s does not follow its map line", f[0], f[1]))
			}
			m := &cur.Maps[len(cur.Maps)-1]
			if f[0] == "image" {
				b, err := unsparse(f[2:])
				if err != nil {
					return nil, bad(err)
				}
				m.Image = b
			} else {
				n, err := strconv.Atoi(f[2])
				if err != nil || n != len(f)-3 {
					return nil, bad(fmt.Errorf("expect: count %q for %d entries", f[2], len(f)-3))
				}
				m.Entries = strings.Join(f[3:], " ")
			}
		case f[0] == "end" && len(f) == 1:
			if cur.Name == "" {
				return nil, bad(fmt.Errorf("program with a bad hex field"))
			}
			cur = nil
		default:
			return nil, bad(fmt.Errorf("unexpected %q", sc.Text()))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("corpus: program %s lacks end", cur.Name)
	}
	return out, nil
}

// CheckCorpus is the Go twin of test/gpu/probe_diff.cu: it loads the
// corpus module in ptxinterp and, per program, sets the maps to their
// initial bytes, runs the harness entry as one thread and compares r0, the
// ctx and the decoded maps (strict: the map bytes too) with the
// expectations. It returns one line per mismatch.
func CheckCorpus(module string, exp []Expect, strict bool) ([]string, error) {
	vm, err := ptxinterp.Load(module)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range exp {
		for _, m := range e.Maps {
			g := vm.Global(m.Symbol)
			if len(g) != len(m.Init) {
				return nil, fmt.Errorf("%s: symbol %s is %d bytes, the corpus says %d", e.Name, m.Symbol, len(g), len(m.Init))
			}
			copy(g, m.Init)
		}
		r, err := runEntry(vm, e.Entry, e.Ctx)
		if err != nil {
			out = append(out, fmt.Sprintf("MISMATCH %s: run: %v", e.Name, err))
			continue
		}
		if uint32(r.R0) != e.R0 {
			out = append(out, fmt.Sprintf("MISMATCH %s: r0 %08x, want %08x", e.Name, uint32(r.R0), e.R0))
		}
		if !bytes.Equal(r.Ctx, e.CtxOut) {
			out = append(out, fmt.Sprintf("MISMATCH %s: ctx %x, want %x", e.Name, r.Ctx, e.CtxOut))
		}
		for _, m := range e.Maps {
			g := vm.Global(m.Symbol)
			l, err := layoutOf(g)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", e.Name, m.Symbol, err)
			}
			ents, err := (&devmap.Image{Layout: l, Bytes: g}).Entries()
			if err != nil {
				out = append(out, fmt.Sprintf("MISMATCH %s: map %s: %v", e.Name, m.Symbol, err))
				continue
			}
			if got := fmtEntries(ents); got != m.Entries {
				out = append(out, fmt.Sprintf("MISMATCH %s: map %s {%s}, want {%s}", e.Name, m.Symbol, got, m.Entries))
			}
			if strict && !bytes.Equal(g, m.Image) {
				out = append(out, fmt.Sprintf("MISMATCH %s: map %s bytes differ from the device map spec", e.Name, m.Symbol))
			}
		}
	}
	return out, nil
}

func layoutOf(img []byte) (abi.MapLayout, error) {
	if len(img) < abi.MapHdrSize {
		return abi.MapLayout{}, fmt.Errorf("symbol shorter than the descriptor")
	}
	le := binary.LittleEndian
	return abi.Layout(abi.MapType(le.Uint32(img)), le.Uint32(img[4:]), le.Uint32(img[8:]), le.Uint32(img[12:]))
}

// sparse writes b as "LEN OFF:HEX ...": the runs of b that are not zero
// (runs closer than 16 zero bytes merged).
func sparse(b []byte) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d", len(b))
	for i := 0; i < len(b); {
		if b[i] == 0 {
			i++
			continue
		}
		j, zeros := i, 0
		for j < len(b) && zeros < 16 {
			if b[j] == 0 {
				zeros++
			} else {
				zeros = 0
			}
			j++
		}
		end := j - zeros
		fmt.Fprintf(&sb, " %d:%x", i, b[i:end])
		i = j
	}
	return sb.String()
}

func unsparse(f []string) ([]byte, error) {
	n, err := strconv.Atoi(f[0])
	if err != nil || n < 0 || n > 1<<30 {
		return nil, fmt.Errorf("bad length %q", f[0])
	}
	b := make([]byte, n)
	for _, seg := range f[1:] {
		o, h, ok := strings.Cut(seg, ":")
		off, err := strconv.Atoi(o)
		if !ok || err != nil {
			return nil, fmt.Errorf("bad run %q", seg)
		}
		d, err := hex.DecodeString(h)
		if err != nil || off < 0 || off+len(d) > n {
			return nil, fmt.Errorf("bad run %q", seg)
		}
		copy(b[off:], d)
	}
	return b, nil
}
