package compile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/helpers"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/gpubpf/ptx"
	"github.com/gpuext/gpuext/gpubpf/verifier"
)

// ConfFile is the module description the interposer reads (docs/device-probes.md).
const ConfFile = abi.ConfFile

// ConfVersion is the version line of module.conf.
const ConfVersion = abi.ConfVersion

// ErrNoProbes: Compile was given an empty probe set.
var ErrNoProbes = errors.New("no probes to compile")

// Bundle is a compiled probe set: the files of a tenant's probes/ directory.
type Bundle struct {
	// Probes is the probe set, sorted: the cache key.
	Probes   []string
	Manifest abi.Manifest
	// PTX is module.ptx: the fragment the interposer splices (no .version/.target).
	PTX string
	// Conf is the base of module.conf (Conf(Manifest)); module.conf is
	// Conf followed by Splice.
	Conf string
	// Splice is the rest of module.conf: how the patcher splices the probes
	// in (guard_entry, guard_exit; see SpliceConf). Kept apart from Conf so
	// a caller that re-renders Conf (another kernel list) keeps it.
	Splice string
	// Inline: the inline form of each attach point (ptx.InlineFile names
	// the file); module.conf says "inline 1" when they are there.
	Inline map[abi.Attach]string
}

// Compiler compiles probe sets of one catalog with one helper library and
// caches the bundles. It is safe for concurrent use.
type Compiler struct {
	catalog *programs.Catalog
	helpers func() (helpers.Library, error)

	mu    sync.Mutex
	cache map[string]func() (*Bundle, error)
}

// NewCompiler returns a compiler for catalog. lib supplies the helper
// library; nil uses the embedded one (helpers.PTX). A library whose PTX is
// empty makes modules that only declare the helpers (.extern), which the
// interpreter gpubpf/ptxinterp implements natively: for tests.
func NewCompiler(catalog *programs.Catalog, lib func() (helpers.Library, error)) *Compiler {
	if lib == nil {
		lib = helpers.PTX
	}
	return &Compiler{catalog: catalog, helpers: lib, cache: map[string]func() (*Bundle, error){}}
}

var defaultCompiler = sync.OnceValue(func() *Compiler { return NewCompiler(programs.Builtin(), nil) })

// Compile compiles a probe set of the built-in catalog with the embedded
// helper library; bundles are cached by set.
func Compile(names []string) (*Bundle, error) { return defaultCompiler().Compile(names) }

// CompileKernels compiles a probe set of the built-in catalog limited to
// kernels (see Compiler.CompileKernels); bundles are cached by set and kernels.
func CompileKernels(names, kernels []string) (*Bundle, error) {
	return defaultCompiler().CompileKernels(names, kernels)
}

// ErrNoKernelLeft: the kernels a container limits its probes to
// (probe-kernels.gpuext.io) and those the probes' catalog entries limit
// them to have none in common.
var ErrNoKernelLeft = errors.New("no kernel left to probe")

// CompileKernels returns the bundle of a probe set whose module.conf
// limits the probes to kernels (.entry names; order and duplicates do not
// matter). kernels narrows: when the probes' catalog entries name kernels,
// the bundle probes the kernels in both lists (none in common is
// ErrNoKernelLeft); otherwise it probes kernels. No kernels is Compile.
// The probe set's bundle is cached; the kernel-limited copy is not (it is
// a copy and a module.conf, and the lists come from containers'
// annotations: a cache of them would grow with every distinct list in the
// long-running NRI plugin).
func (c *Compiler) CompileKernels(names, kernels []string) (*Bundle, error) {
	ks := slices.Clone(kernels)
	slices.Sort(ks)
	ks = slices.Compact(ks)
	base, err := c.Compile(names)
	if err != nil || len(ks) == 0 {
		return base, err
	}
	b, err := limitKernels(base, ks)
	if err != nil {
		return nil, fmt.Errorf("compile probes %s for kernels %s: %w", strings.Join(base.Probes, ","), strings.Join(ks, ","), err)
	}
	return b, nil
}

// limitKernels is base limited to kernels (sorted, no duplicates): a copy,
// since base is cached.
func limitKernels(base *Bundle, kernels []string) (*Bundle, error) {
	limited := kernels
	if catalog := base.Manifest.Kernels; len(catalog) > 0 {
		limited = nil
		for _, k := range kernels {
			if slices.Contains(catalog, k) {
				limited = append(limited, k)
			}
		}
		if len(limited) == 0 {
			return nil, fmt.Errorf("%w: the probes' catalog entries limit them to %s", ErrNoKernelLeft, strings.Join(catalog, ","))
		}
	}
	b := *base
	b.Manifest.Kernels = slices.Clone(limited)
	b.Conf = Conf(b.Manifest)
	return &b, nil
}

// Compile returns the bundle of a probe set (order and duplicates do not
// matter), compiling it on first use.
func (c *Compiler) Compile(names []string) (*Bundle, error) {
	set := slices.Clone(names)
	slices.Sort(set)
	set = slices.Compact(set)
	if len(set) == 0 {
		return nil, ErrNoProbes
	}
	key := strings.Join(set, ",")
	c.mu.Lock()
	f, ok := c.cache[key]
	if !ok {
		f = sync.OnceValues(func() (*Bundle, error) { return c.compile(set) })
		c.cache[key] = f
	}
	c.mu.Unlock()
	b, err := f()
	if err != nil {
		return nil, fmt.Errorf("compile probes %s: %w", key, err)
	}
	return b, nil
}

func (c *Compiler) compile(set []string) (*Bundle, error) {
	if err := c.catalog.Check(set); err != nil {
		return nil, err
	}
	var in []probeInput
	for _, name := range set {
		p, _ := c.catalog.Get(name)
		spec, err := c.catalog.Spec(name)
		if err != nil {
			return nil, err
		}
		in = append(in, probeInput{Name: name, Object: p.Object, Spec: spec, Programs: p.Programs, Kernels: p.Kernels, LaunchTime: p.LaunchTime, HostWrites: p.HostWrites})
	}
	lib, err := c.helpers()
	if err != nil {
		return nil, fmt.Errorf("helper library: %w", err)
	}
	return compileInputs(in, lib)
}

// probeInput is one probe of a set: what its catalog entry says and its
// object's collection.
type probeInput struct {
	Name, Object string
	Spec         *ebpf.CollectionSpec
	Programs     []string
	Kernels      []string
	LaunchTime   bool
	HostWrites   []programs.HostWrite
}

// compileInputs verifies, merges and translates a probe set (sorted by
// name) into its bundle.
func compileInputs(in []probeInput, lib helpers.Library) (*Bundle, error) {
	merged := &ebpf.CollectionSpec{Maps: map[string]*ebpf.MapSpec{}, Programs: map[string]*ebpf.ProgramSpec{}}
	mapOwner, progOwner := map[string]string{}, map[string]string{}
	var progs, set []string
	var kernels []string
	kernelsFrom := ""
	launchTime := false
	fused := map[string][]int{}
	for i, p := range in {
		name, spec := p.Name, p.Spec
		set = append(set, name)
		rep, err := verify(name, p.Object, spec)
		if err != nil {
			return nil, err
		}
		byProg := map[string]*verifier.Result{}
		for _, r := range rep.Programs {
			byProg[r.Prog] = r
			if len(r.FusedAdds) > 0 {
				fused[r.Prog] = r.FusedAdds
			}
		}
		for mn, ms := range spec.Maps {
			if strings.HasPrefix(mn, ".") {
				return nil, fmt.Errorf("probe %q: global data (%s) cannot be merged with other probes; use maps", name, mn)
			}
			if other, dup := mapOwner[mn]; dup {
				return nil, fmt.Errorf("probes %q and %q both define map %q", other, name, mn)
			}
			mapOwner[mn] = name
			merged.Maps[mn] = ms
		}
		for _, pn := range p.Programs {
			if other, dup := progOwner[pn]; dup {
				return nil, fmt.Errorf("probes %q and %q both define program %q", other, name, pn)
			}
			progOwner[pn] = name
			merged.Programs[pn] = spec.Programs[pn]
			progs = append(progs, pn)
		}
		// One module has one kernel list: probes limited to kernels can
		// only be merged when they name the same ones.
		ks, err := probeKernels(name, p.Kernels, p.Programs, byProg)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			kernels, kernelsFrom = ks, name
		} else if !slices.Equal(kernels, ks) {
			return nil, fmt.Errorf("probes %q and %q probe different kernels (%v, %v): one module probes one set", kernelsFrom, name, kernels, ks)
		}
		launchTime = launchTime || p.LaunchTime || len(p.HostWrites) > 0
	}
	// bpftime arrays only added to get a copy per warp slot (ptx.StripeArrays),
	// not those the host writes
	hostWritten := map[string]bool{}
	for _, p := range in {
		for _, hw := range p.HostWrites {
			hostWritten[hw.Map] = true
		}
	}
	ptx.StripeArrays(merged, progs, fused, func(name string) bool { return hostWritten[name] })
	mod, err := ptx.Translate(merged, progs, ptx.Options{Helpers: lib.PTX, FusedAdds: fused})
	if err != nil {
		return nil, fmt.Errorf("translate: %w", err)
	}
	m := mod.Manifest
	if lib.PTX != "" {
		if lib.Version != "" && versionLess(m.MinPTX, lib.Version) {
			m.MinPTX = lib.Version
		}
		m.MinTarget = max(m.MinTarget, lib.Target)
	}
	m.Probes = set
	m.Kernels = kernels
	m.LaunchTime = launchTime
	if m.HostWrites, err = hostWrites(in, m.Maps); err != nil {
		return nil, err
	}
	return &Bundle{Probes: set, Manifest: m, PTX: mod.PTX, Conf: Conf(m), Splice: SpliceConf(mod), Inline: mod.Inline}, nil
}

// hostWrites places each probe's hostWrites in the module: the element's
// value in its map's symbol (an array entry is [u64 seq][value]).
func hostWrites(in []probeInput, mis []abi.MapInfo) ([]abi.HostWrite, error) {
	var out []abi.HostWrite
	for _, p := range in {
		for _, hw := range p.HostWrites {
			i := slices.IndexFunc(mis, func(mi abi.MapInfo) bool { return mi.Name == hw.Map })
			if i < 0 {
				return nil, fmt.Errorf("probe %q: hostWrites: map %q is not in the module (no program of the probe uses it)", p.Name, hw.Map)
			}
			l := mis[i].Layout
			if l.Type != abi.MapArray || l.ValueSize != 8 || hw.Key >= l.MaxEntries {
				return nil, fmt.Errorf("probe %q: hostWrites: map %q element %d: not a u64 element of an array (%+v)", p.Name, hw.Map, hw.Key, l)
			}
			off := uint64(abi.MapHdrSize) + uint64(hw.Key)*uint64(l.Stride) + 8
			out = append(out, abi.HostWrite{Map: hw.Map, Key: hw.Key, Symbol: mis[i].Symbol, Offset: off, Value: hw.Value})
		}
	}
	return out, nil
}

// probeKernels is the kernel list of one probe (sorted, no duplicates):
// its catalog entry's kernels when it names some, else the kernels its
// programs' sections name (bpftime's kprobe/KERNEL) when every program
// names one, else none (every kernel). A program of a kprobe/KERNEL
// section runs only in KERNEL in any case (its kernel id is tested at the
// site); with catalog kernels, a section's kernel outside them is an error
// (the program could never run).
func probeKernels(probeName string, catalog, progs []string, results map[string]*verifier.Result) ([]string, error) {
	var fromSections []string
	all := len(progs) > 0
	for _, pn := range progs {
		r := results[pn]
		if r == nil || r.Kernel == "" {
			all = false
			continue
		}
		if len(catalog) > 0 && !slices.Contains(catalog, r.Kernel) {
			return nil, fmt.Errorf("probe %q: program %q runs only in kernel %s (its section), which the catalog entry's kernels (%s) leave out", probeName, pn, r.Kernel, strings.Join(catalog, ","))
		}
		fromSections = append(fromSections, r.Kernel)
	}
	ks := slices.Clone(catalog)
	if len(ks) == 0 && all {
		ks = fromSections
	}
	slices.Sort(ks)
	return slices.Compact(ks), nil
}

// SpliceConf renders the module.conf lines that tell the patcher how to
// splice a translated module in (docs/device-probes.md). An older
// interposer ignores them (unknown directives) and calls the dispatch
// functions in every thread, which is always correct:
//
//	guard_entry thread0|none   thread0: every kernel_entry program acts only in
//	guard_exit thread0|none    the thread of linear id 0 of its block, so only
//	                           that thread needs to run the attach point
//	inline 1                   the bundle holds inline_entry.ptx and
//	                           inline_exit.ptx (ptx.InlineFile): paste them
//	                           at the sites instead of calling the dispatch
func SpliceConf(mod *ptx.Module) string {
	var b strings.Builder
	if len(mod.Inline) == 2 {
		fmt.Fprintf(&b, "%s 1\n", abi.ConfDirectiveInline)
	}
	for _, a := range []abi.Attach{abi.KernelEntry, abi.KernelExit} {
		g := abi.ConfGuardNone
		if mod.Guard[a] {
			g = abi.ConfGuardThread0
		}
		d := abi.ConfDirectiveGuardEntry
		if a == abi.KernelExit {
			d = abi.ConfDirectiveGuardExit
		}
		fmt.Fprintf(&b, "%s %s\n", d, g)
	}
	return b.String()
}

// Conf renders module.conf, the line format the C side of the interposer
// reads (docs/device-probes.md):
//
//	version 1
//	min_ptx 7.8
//	min_target 70
//	launch_time 0|1
//	kernel NAME                  (zero or more; none = every .entry)
//	map NAME SYMBOL TOTAL_BYTES  (TOTAL_BYTES = descriptor + data)
//	host_write VALUE SYMBOL OFFSET (zero or more: the interposer writes VALUE,
//	                             launch-time or clock-offset, as a u64 at
//	                             OFFSET in SYMBOL; an older one ignores it)
func Conf(m abi.Manifest) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d\n", abi.ConfDirectiveVersion, ConfVersion)
	fmt.Fprintf(&b, "%s %s\n", abi.ConfDirectiveMinPTX, m.MinPTX)
	fmt.Fprintf(&b, "%s %d\n", abi.ConfDirectiveMinTarget, m.MinTarget)
	lt := 0
	if m.LaunchTime {
		lt = 1
	}
	fmt.Fprintf(&b, "%s %d\n", abi.ConfDirectiveLaunchTime, lt)
	for _, k := range m.Kernels {
		fmt.Fprintf(&b, "%s %s\n", abi.ConfDirectiveKernel, k)
	}
	for _, mi := range m.Maps {
		fmt.Fprintf(&b, "%s %s %s %d\n", abi.ConfDirectiveMap, mi.Name, mi.Symbol, uint64(abi.MapHdrSize)+mi.Layout.DataSize)
	}
	for _, hw := range m.HostWrites {
		fmt.Fprintf(&b, "%s %s %s %d\n", abi.ConfDirectiveHostWrite, hw.Value, hw.Symbol, hw.Offset)
	}
	return b.String()
}

// ManifestJSON is manifest.json.
func (b *Bundle) ManifestJSON() []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(b.Manifest); err != nil {
		panic(err) // a Manifest always encodes
	}
	return buf.Bytes()
}

// Files are the bundle's files by name.
func (b *Bundle) Files() map[string][]byte {
	files := map[string][]byte{
		abi.ModuleFile:   []byte(b.PTX),
		abi.ManifestFile: b.ManifestJSON(),
		ConfFile:         []byte(b.Conf + b.Splice),
	}
	for a, text := range b.Inline {
		files[ptx.InlineFile(a)] = []byte(text)
	}
	return files
}

func versionLess(a, b string) bool {
	var ma, na, mb, nb int
	fmt.Sscanf(a, "%d.%d", &ma, &na)
	fmt.Sscanf(b, "%d.%d", &mb, &nb)
	return ma < mb || (ma == mb && na < nb)
}
