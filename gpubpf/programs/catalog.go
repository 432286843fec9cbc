package programs

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/programs/catalog"
	"github.com/gpuext/gpuext/lib/strictjson"
)

//go:embed catalog/*.json *.o
var builtinFS embed.FS

// ErrUnknownProbe: a probe name the catalog does not hold.
var ErrUnknownProbe = catalog.ErrUnknownProbe

// ErrBadCatalog: a catalog entry that does not decode or does not match its object.
var ErrBadCatalog = errors.New("bad probe catalog")

// NameRE is what a probe name looks like (the policy model checks the same).
var NameRE = catalog.NameRE

// ViewKind says how the CLI renders one map of a probe.
type ViewKind string

const (
	// ViewCounters: an array of u64 counters; Fields names them by index.
	ViewCounters ViewKind = "counters"
	// ViewSMHistogram: an array of u64 indexed by SM id; rendered as the
	// number of SMs used and the fewest and most counts of a used SM.
	ViewSMHistogram ViewKind = "sm-histogram"
	// ViewLog2Histogram: an array of u64 where entry b counts values of bit
	// length b ([2^(b-1), 2^b), entry 0 the value 0); rendered as p50/p99.
	ViewLog2Histogram ViewKind = "log2-histogram"
	// ViewHash: a hash map; Key and Value lay out its keys and values.
	// Rendered as the number of live keys and the Top entries (by the
	// value's first unsigned field, most first); numeric value fields of
	// one key are summed over images.
	ViewHash ViewKind = "hash"
	// ViewRecords: a ring buffer; Record lays out its records. Rendered as
	// the records written, those dropped, and the Last records decoded.
	ViewRecords ViewKind = "records"
	// ViewPerThread: a per-thread array of u64 values (one row per thread
	// of the launch, bpftime's PERGPUTD_ARRAY_MAP); Fields name the
	// entries of a row by index. Rendered per entry as the rows used (not
	// 0), their sum, the fewest and most of a used row, and a log2
	// histogram of the used rows' values; rows are summed over images.
	ViewPerThread ViewKind = "per-thread"
)

var viewKinds = []ViewKind{ViewCounters, ViewSMHistogram, ViewLog2Histogram, ViewHash, ViewRecords, ViewPerThread}

// MaxPerThreadFields bounds the entries a per-thread view names (the
// reader keeps each named entry's rows).
const MaxPerThreadFields = 16

// Bounds of a view's Top and Last, and their defaults.
const (
	MaxViewEntries     = 1000
	DefaultViewTop     = 20
	DefaultViewLast    = 10
	MaxKernelNameBytes = abi.MaxKernelNameBytes // what the interposer's module.conf parser takes
)

// Probe is one catalog entry.
type Probe struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Object is the ELF file of the probe, beside the catalog directory.
	Object string `json:"object"`
	// Programs are the ELF programs (functions in gpuext/kernel_entry or
	// gpuext/kernel_exit sections) the probe runs.
	Programs []string `json:"programs"`
	// LaunchTime: the probe reads ctx->launch_ns, so the interposer must
	// write the host launch time before each launch.
	LaunchTime bool `json:"launchTime,omitempty"`
	// Kernels limits the probe to these .entry names; empty = every kernel.
	Kernels []string `json:"kernels,omitempty"`
	// Retarget: the programs' bpftime sections (kprobe/KERNEL,
	// kretprobe/KERNEL) name a kernel of the app the object was written
	// for; run the unchanged object in Kernels instead (every kernel when
	// Kernels is empty). Every program must be in such a section.
	Retarget bool `json:"retarget,omitempty"`
	// Views say how the CLI shows the probe's maps.
	Views []View `json:"views"`
	// HostWrites are map elements the interposer writes, not a program:
	// what a host-side program or loader writes for a device program in
	// bpftime (a launch's time, a clock offset). Each implies LaunchTime.
	HostWrites []HostWrite `json:"hostWrites,omitempty"`
	// Source is the catalog file the entry came from.
	Source string `json:"-"`
	// Refused: programs of a probe directory entry's object that do not
	// run (LoadDir), with why; Programs are those that do.
	Refused []Refusal `json:"-"`
}

// View is how one map of a probe is rendered.
type View struct {
	Map  string   `json:"map"`
	Kind ViewKind `json:"kind"`
	// Fields name the entries of a counters map, by index.
	Fields []string `json:"fields,omitempty"`
	// Means are derived values sum/count of two fields of a counters map.
	Means []Mean `json:"means,omitempty"`
	// Unit of a histogram's values ("ns").
	Unit string `json:"unit,omitempty"`
	// Key and Value lay out a hash view's keys and values; Top is how
	// many entries it shows (0: DefaultViewTop).
	Key   []Field `json:"key,omitempty"`
	Value []Field `json:"value,omitempty"`
	Top   int     `json:"top,omitempty"`
	// Record lays out a records view's ring-buffer records; Last is how
	// many of the last records it shows (0: DefaultViewLast).
	Record []Field `json:"record,omitempty"`
	Last   int     `json:"last,omitempty"`
}

// TopOrDefault is Top, or DefaultViewTop when unset.
func (v View) TopOrDefault() int {
	if v.Top == 0 {
		return DefaultViewTop
	}
	return v.Top
}

// LastOrDefault is Last, or DefaultViewLast when unset.
func (v View) LastOrDefault() int {
	if v.Last == 0 {
		return DefaultViewLast
	}
	return v.Last
}

// HostWrite names one u64 element of an array map of the probe that the
// interposer writes: Value is abi.HostLaunchTime (before each launch, on
// its stream) or abi.HostClockOffset (at bind). The map must be an
// array (bpftime's GPU arrays included) of 8-byte values that a program of
// the probe uses (only those are in the module), Key below max_entries.
type HostWrite struct {
	Map   string `json:"map"`
	Key   uint32 `json:"key"`
	Value string `json:"value"`
}

// MaxHostWrites bounds a probe's hostWrites (module.conf's host_write lines).
// It is the interposer's limit (GPUEXT_DEVRT_CONF_MAX_HOST_WRITES).
const MaxHostWrites = abi.MaxHostWrites

// Mean is a derived value of a counters view: Sum / Count.
type Mean struct {
	Name  string `json:"name"`
	Sum   string `json:"sum"`
	Count string `json:"count"`
	// InFlight, when set, names the field counting the starts of what
	// Count counts the ends of, and says Sum is a sum of end stamps minus
	// start stamps: it is a sum of durations only when nothing is in
	// flight, so the mean takes the images whose reading has InFlight
	// equal to Count and Sum, read as signed, not negative.
	InFlight string `json:"inFlight,omitempty"`
}

// Catalog is a set of validated probes with their objects. It is immutable.
type Catalog struct {
	probes  map[string]Probe
	objects map[string][]byte // probe name -> ELF bytes
}

var builtin = sync.OnceValue(func() *Catalog {
	c, err := Load(builtinFS, "catalog", ".")
	if err != nil {
		panic("probes: embedded probe catalog is broken: " + err.Error())
	}
	return c
})

// Builtin returns the embedded probe catalog. It panics only if the embedded
// files are broken, which TestBuiltinCatalog rules out.
func Builtin() *Catalog { return builtin() }

// Load reads every NAME.json of catalogDir in fsys and the object each names
// from objectDir, decodes strictly and checks each entry against its object.
// Errors name the file and the field.
func Load(fsys fs.FS, catalogDir, objectDir string) (*Catalog, error) {
	entries, err := fs.ReadDir(fsys, catalogDir)
	if err != nil {
		return nil, fmt.Errorf("load probe catalog: %w", err)
	}
	c := &Catalog{probes: map[string]Probe{}, objects: map[string][]byte{}}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		file := path.Join(catalogDir, e.Name())
		p, obj, err := loadProbe(fsys, file, objectDir)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		c.probes[p.Name] = p
		c.objects[p.Name] = obj
	}
	return c, nil
}

func catalogErr(field, format string, args ...any) error {
	return &fieldErr{field: field, msg: fmt.Sprintf(format, args...)}
}

func loadProbe(fsys fs.FS, file, objectDir string) (Probe, []byte, error) {
	data, err := fs.ReadFile(fsys, file)
	if err != nil {
		return Probe{}, nil, err
	}
	var p Probe
	if err := strictjson.Decode(data, &p); err != nil {
		return Probe{}, nil, &fieldErr{msg: err.Error()}
	}
	p.Source = file
	if want := strings.TrimSuffix(path.Base(file), ".json"); p.Name != want {
		return Probe{}, nil, catalogErr("name", "%q must match the file name %q", p.Name, want)
	}
	if !NameRE.MatchString(p.Name) {
		return Probe{}, nil, catalogErr("name", "%q must match %s", p.Name, NameRE)
	}
	if strings.TrimSpace(p.Description) == "" {
		return Probe{}, nil, catalogErr("description", "is empty")
	}
	if p.Object == "" || path.Base(p.Object) != p.Object {
		return Probe{}, nil, catalogErr("object", "%q must be a file name beside the catalog", p.Object)
	}
	obj, err := fs.ReadFile(fsys, path.Join(objectDir, p.Object))
	if err != nil {
		return Probe{}, nil, catalogErr("object", "%v", err)
	}
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(obj))
	if err != nil {
		return Probe{}, nil, catalogErr("object", "%s: %v", p.Object, err)
	}
	if err := p.check(spec); err != nil {
		return Probe{}, nil, err
	}
	return p, obj, nil
}

// check validates the entry against its object's programs and maps.
func (p Probe) check(spec *ebpf.CollectionSpec) error {
	if len(p.Programs) == 0 {
		return catalogErr("programs", "is empty")
	}
	for i, name := range p.Programs {
		field := fmt.Sprintf("programs[%d]", i)
		ps, ok := spec.Programs[name]
		if !ok {
			return catalogErr(field, "%s has no program %q (has: %s)", p.Object, name, strings.Join(slices.Sorted(maps.Keys(spec.Programs)), ", "))
		}
		if _, ok := abi.AttachOfSection(ps.SectionName); !ok {
			return catalogErr(field, "program %q is in section %q, want %s or %s", name, ps.SectionName, abi.SecKernelEntry, abi.SecKernelExit)
		}
		if slices.Contains(p.Programs[:i], name) {
			return catalogErr(field, "program %q listed twice", name)
		}
		if sec, _ := abi.ParseSection(ps.SectionName); p.Retarget && (!sec.Bpftime || sec.Kernel == "") {
			return catalogErr("retarget", "program %q is in section %q, which names no kernel to replace (retarget is for bpftime's kprobe/KERNEL and kretprobe/KERNEL)", name, ps.SectionName)
		}
	}
	for i, k := range p.Kernels {
		if k == "" || strings.ContainsFunc(k, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == '#' }) {
			return catalogErr(fmt.Sprintf("kernels[%d]", i), "%q is not a .entry name", k)
		}
		if len(k) > MaxKernelNameBytes {
			return catalogErr(fmt.Sprintf("kernels[%d]", i), "a %d-byte name, at most %d", len(k), MaxKernelNameBytes)
		}
	}
	if len(p.Views) == 0 {
		return catalogErr("views", "is empty: the CLI would show nothing of the probe")
	}
	for i, v := range p.Views {
		if err := v.check(spec); err != nil {
			return fmt.Errorf("views[%d].%w", i, err)
		}
	}
	if len(p.HostWrites) > MaxHostWrites {
		return catalogErr("hostWrites", "%d elements, at most %d", len(p.HostWrites), MaxHostWrites)
	}
	used := mapsUsed(spec, p.Programs)
	for i, hw := range p.HostWrites {
		if err := hw.check(spec, used); err != nil {
			return fmt.Errorf("hostWrites[%d].%w", i, err)
		}
		for j, o := range p.HostWrites[:i] {
			if o.Map == hw.Map && o.Key == hw.Key {
				return catalogErr(fmt.Sprintf("hostWrites[%d].key", i), "map %q element %d is hostWrites[%d] already", hw.Map, hw.Key, j)
			}
		}
	}
	return nil
}

// mapsUsed are the maps the programs load (ld_imm64 of a map): the maps
// the translated module holds.
func mapsUsed(spec *ebpf.CollectionSpec, progs []string) map[string]bool {
	used := map[string]bool{}
	for _, pn := range progs {
		if ps, ok := spec.Programs[pn]; ok {
			for _, ins := range ps.Instructions {
				if ins.IsLoadFromMap() && ins.Reference() != "" {
					used[ins.Reference()] = true
				}
			}
		}
	}
	return used
}

func (hw HostWrite) check(spec *ebpf.CollectionSpec, used map[string]bool) error {
	m, dm, mtype, err := specMap(spec, hw.Map)
	if err != nil {
		return err
	}
	if dm.Type != abi.MapArray || m.ValueSize != 8 {
		return catalogErr("map", "map %q is a %s map of %d-byte values, the interposer writes a u64 element of an array", hw.Map, mtype, m.ValueSize)
	}
	if !used[hw.Map] {
		return catalogErr("map", "map %q is used by none of the probe's programs, so the module does not hold it", hw.Map)
	}
	if hw.Key >= m.MaxEntries {
		return catalogErr("key", "%d is out of map %q's %d entries", hw.Key, hw.Map, m.MaxEntries)
	}
	if !slices.Contains(abi.HostValues, hw.Value) {
		return catalogErr("value", "unknown value %q (want one of: %s)", hw.Value, strings.Join(abi.HostValues, ", "))
	}
	return nil
}

// fieldErr is a catalog error naming the field; it matches ErrBadCatalog.
type fieldErr struct {
	field, msg string
}

func (e *fieldErr) Error() string {
	if e.field == "" {
		return e.msg
	}
	return e.field + ": " + e.msg
}
func (e *fieldErr) Unwrap() error { return ErrBadCatalog }

// deviceMap is what the loader makes of the map on the device
// (abi.DeviceMapOf: bpftime's GPU map types become gpuext's), and a
// name for its type in messages.
// specMap is the object's map name, what the device makes of it, and its
// type as a message names it; a missing map is an error listing the maps.
func specMap(spec *ebpf.CollectionSpec, name string) (*ebpf.MapSpec, abi.DeviceMap, string, error) {
	m, ok := spec.Maps[name]
	if !ok {
		return nil, abi.DeviceMap{}, "", catalogErr("map", "object has no map %q (has: %s)", name, strings.Join(slices.Sorted(maps.Keys(spec.Maps)), ", "))
	}
	dm, err := abi.DeviceMapOf(uint32(m.Type), m.ValueSize, m.MaxEntries, m.MapExtra)
	if err != nil {
		return m, dm, "", catalogErr("map", "map %q: %v", m.Name, err)
	}
	if t := uint32(m.Type); t >= abi.BtMapGPUHash {
		return m, dm, fmt.Sprintf("%s (type %d)", dm.Type, t), nil
	}
	return m, dm, m.Type.String(), nil
}

func (v View) check(spec *ebpf.CollectionSpec) error {
	bad := catalogErr
	m, dm, mtype, err := specMap(spec, v.Map)
	if err != nil {
		return err
	}
	if !slices.Contains(viewKinds, v.Kind) {
		return bad("kind", "unknown view kind %q (want one of: %s)", v.Kind, kindList())
	}
	if v.Kind != ViewHash && (len(v.Key) > 0 || len(v.Value) > 0 || v.Top != 0) {
		return bad("key", "only a hash view has key, value and top")
	}
	if v.Kind != ViewRecords && (len(v.Record) > 0 || v.Last != 0) {
		return bad("record", "only a records view has record and last")
	}
	switch v.Kind {
	case ViewHash:
		return v.checkHash(m, dm, mtype)
	case ViewRecords:
		return v.checkRecords(m, dm, mtype)
	case ViewPerThread:
		if dm.Type != abi.MapPerThread {
			return bad("map", "map %q is a %s map, a per-thread view needs a per-thread array (type %d or bpftime's %d/%d)",
				v.Map, mtype, abi.MapTypePerThread, abi.BtMapPerThread, abi.BtMapPerThreadHost)
		}
	default:
		// a per-warp or per-thread array is read summed over its copies
		if dm.Type != abi.MapArray && dm.Type != abi.MapPerWarp && dm.Type != abi.MapPerThread {
			return bad("map", "map %q is a %s map, a %s view needs an array", v.Map, mtype, v.Kind)
		}
	}
	if m.ValueSize != 8 {
		return bad("map", "map %q has %d-byte values, a %s view needs u64 counters", v.Map, m.ValueSize, v.Kind)
	}
	switch v.Kind {
	case ViewCounters, ViewPerThread:
		if len(v.Fields) == 0 {
			return bad("fields", "a %s view names its entries", v.Kind)
		}
		if v.Kind == ViewPerThread {
			if len(v.Fields) > MaxPerThreadFields {
				return bad("fields", "%d names, a per-thread view shows at most %d entries", len(v.Fields), MaxPerThreadFields)
			}
			if len(v.Means) > 0 || v.Unit != "" {
				return bad("means", "a per-thread view has fields only")
			}
		}
		if uint32(len(v.Fields)) > m.MaxEntries {
			return bad("fields", "%d names for a map of %d entries", len(v.Fields), m.MaxEntries)
		}
		for i, f := range v.Fields {
			if f == "" || slices.Contains(v.Fields[:i], f) {
				return bad(fmt.Sprintf("fields[%d]", i), "%q is empty or listed twice", f)
			}
		}
		for i, mean := range v.Means {
			if mean.Name == "" || slices.Contains(v.Fields, mean.Name) {
				return bad(fmt.Sprintf("means[%d].name", i), "%q is empty or a field name", mean.Name)
			}
			if !slices.Contains(v.Fields, mean.Sum) {
				return bad(fmt.Sprintf("means[%d].sum", i), "%q is not one of the fields", mean.Sum)
			}
			if !slices.Contains(v.Fields, mean.Count) {
				return bad(fmt.Sprintf("means[%d].count", i), "%q is not one of the fields", mean.Count)
			}
			if mean.InFlight != "" && (!slices.Contains(v.Fields, mean.InFlight) || mean.InFlight == mean.Count) {
				return bad(fmt.Sprintf("means[%d].inFlight", i), "%q is not one of the fields other than count", mean.InFlight)
			}
		}
	default:
		if len(v.Fields) > 0 || len(v.Means) > 0 {
			return bad("fields", "only a counters view has fields and means")
		}
	}
	return nil
}

func (v View) checkHash(m *ebpf.MapSpec, dm abi.DeviceMap, mtype string) error {
	if len(v.Fields) > 0 || len(v.Means) > 0 || v.Unit != "" {
		return catalogErr("fields", "a hash view has key and value, not fields, means or unit")
	}
	if dm.Type != abi.MapHash {
		return catalogErr("map", "map %q is a %s map, a hash view needs a hash", v.Map, mtype)
	}
	for _, l := range []struct {
		field  string
		fields []Field
		size   uint32
	}{{"key", v.Key, m.KeySize}, {"value", v.Value, m.ValueSize}} {
		size, err := checkLayout(l.field, l.fields)
		if err != nil {
			return err
		}
		if uint32(size) != l.size {
			return catalogErr(l.field, "the fields take %d bytes (laid out as C does), map %q has %d-byte %ss", size, v.Map, l.size, l.field)
		}
	}
	if v.Top < 0 || v.Top > MaxViewEntries {
		return catalogErr("top", "%d is out of range 0..%d (0: %d)", v.Top, MaxViewEntries, DefaultViewTop)
	}
	return nil
}

func (v View) checkRecords(m *ebpf.MapSpec, dm abi.DeviceMap, mtype string) error {
	if len(v.Fields) > 0 || len(v.Means) > 0 || v.Unit != "" {
		return catalogErr("fields", "a records view has record, not fields, means or unit")
	}
	if dm.Type != abi.MapRingbuf {
		return catalogErr("map", "map %q is a %s map, a records view needs a ring buffer", v.Map, mtype)
	}
	size, err := checkLayout("record", v.Record)
	if err != nil {
		return err
	}
	if dm.PerLane {
		// bpftime's GPU ring buffer: value_size is the largest record
		if uint32(size) > m.ValueSize {
			return catalogErr("record", "a %d-byte record is larger than map %q's %d-byte records", size, v.Map, m.ValueSize)
		}
	} else if uint32(size) > m.MaxEntries {
		return catalogErr("record", "a %d-byte record does not fit map %q's %d bytes", size, v.Map, m.MaxEntries)
	}
	if v.Last < 0 || v.Last > MaxViewEntries {
		return catalogErr("last", "%d is out of range 0..%d (0: %d)", v.Last, MaxViewEntries, DefaultViewLast)
	}
	return nil
}

func kindList() string {
	s := make([]string, len(viewKinds))
	for i, k := range viewKinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// Get returns the named probe.
func (c *Catalog) Get(name string) (Probe, bool) {
	p, ok := c.probes[name]
	p.Programs, p.Kernels, p.Views, p.HostWrites = slices.Clone(p.Programs), slices.Clone(p.Kernels), slices.Clone(p.Views), slices.Clone(p.HostWrites)
	p.Refused = slices.Clone(p.Refused)
	return p, ok
}

// Names returns the probe names, sorted.
func (c *Catalog) Names() []string { return slices.Sorted(maps.Keys(c.probes)) }

// Check returns an error wrapping ErrUnknownProbe for the first name the
// catalog does not hold.
func (c *Catalog) Check(names []string) error { return catalog.Check(c.Names(), names) }

// Object returns a copy of the probe's ELF object.
func (c *Catalog) Object(name string) ([]byte, error) {
	obj, ok := c.objects[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownProbe, name)
	}
	return slices.Clone(obj), nil
}

// Spec loads the probe's ELF object as a fresh CollectionSpec (the caller
// may change it).
func (c *Catalog) Spec(name string) (*ebpf.CollectionSpec, error) {
	obj, ok := c.objects[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownProbe, name)
	}
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(obj))
	if err != nil {
		return nil, fmt.Errorf("probe %q: load %s: %w", name, c.probes[name].Object, err)
	}
	p := c.probes[name]
	// only the programs that run: those refused or not selected are not
	// verified again or translated
	for pn := range spec.Programs {
		if !slices.Contains(p.Programs, pn) {
			delete(spec.Programs, pn)
		}
	}
	if p.Retarget {
		retarget(spec, p.Programs)
	}
	return spec, nil
}

// retarget gives progs (bpftime sections, Probe.check) the section of
// their attach point that names every kernel (kprobe/*, kretprobe/*): the
// verifier and translator then place no kernel test, and the probe's
// Kernels choose where it runs.
func retarget(spec *ebpf.CollectionSpec, progs []string) {
	for _, pn := range progs {
		ps := spec.Programs[pn]
		if sec, ok := abi.ParseSection(ps.SectionName); ok && sec.Bpftime {
			prefix := abi.SecKprobe
			if sec.Attach == abi.KernelExit {
				prefix = abi.SecKretprobe
			}
			ps.SectionName = prefix + abi.AnyKernel
		}
	}
}
