package kernelpolicy

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/lib/strictjson"
	"github.com/gpuext/gpuext/lib/tenantfs"
	"github.com/gpuext/gpuext/policies"
)

// A kernel policy directory (the config's kernelPolicyDir) holds policies
// that are not built in: for each, NAME.json (a Descriptor) and the BPF
// object it names (NAME.bpf.o by default), built with the SDK
// (docs/write-a-policy.md).  Catalog policies and container overrides name a
// memory policy of the directory in memory.eviction / memory.prefetch like a
// built-in algorithm; a scheduling policy serves the classes it claims.

// ErrBadPolicyDir: a descriptor or object of a kernel policy directory is
// invalid (the error names the file and the field).
var ErrBadPolicyDir = errors.New("bad kernel policy")

// Limits on what a kernel policy directory may hold.
const (
	MaxDescriptorBytes = 64 << 10
	MaxObjectBytes     = 16 << 20
	MaxDirPolicies     = 64
)

// ABIVariable is the global the SDK's GPUEXT_POLICY_ABI macro defines in an
// object: the GPUEXT_ABI_VERSION it was built against.
const ABIVariable = "gpuext_policy_abi"

var (
	dirNameRE   = regexp.MustCompile(fmt.Sprintf(`^[a-z][a-z0-9-]{0,%d}$`, bpf.MaxOpsNameLen-1)) // its ops name fits GPUEXT_OPS_NAME_LEN
	paramNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,30}$`)
	objectRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,200}\.o$`)
)

// Descriptor is a kernel policy directory's NAME.json.
type Descriptor struct {
	// Name is the policy's name (the file name without .json), what the
	// catalog and overrides name; its ops name in the core is Name with
	// '-' as '_'.
	Name string `json:"name"`
	// Kind is "memory" (gpuext_mem_ops) or "scheduling" (gpuext_sched_ops).
	Kind        string `json:"kind"`
	Description string `json:"description,omitempty"`
	// Object is the BPF object's file name in the directory; "" = NAME.bpf.o.
	Object string `json:"object,omitempty"`
	// Eviction and Prefetch say that a memory policy can be named as an
	// eviction or prefetch algorithm (its object implements evict_prepare,
	// prefetch) and which parameter it takes.
	Eviction *AlgorithmDescriptor `json:"eviction,omitempty"`
	Prefetch *AlgorithmDescriptor `json:"prefetch,omitempty"`
	// Classes are the priority classes a scheduling policy claims.
	Classes []policies.PriorityClass `json:"classes,omitempty"`
}

// AlgorithmDescriptor is one algorithm a memory policy provides.
type AlgorithmDescriptor struct {
	Doc string `json:"doc,omitempty"`
	// Param is its parameter, the tenant config's eviction_param or
	// prefetch_param (one per algorithm); nil = none.
	Param *ParamDescriptor `json:"param,omitempty"`
}

// ParamDescriptor is a parameter and its range; a tenant's value is
// checked against it before it reaches the kernel.
type ParamDescriptor struct {
	Name string `json:"name"`
	Min  int64  `json:"min"`
	Max  int64  `json:"max"`
	// Default applies when a policy or override omits the parameter; 0 =
	// none (the program sees 0 and chooses).
	Default int64  `json:"default,omitempty"`
	Doc     string `json:"doc,omitempty"`
}

// DirPolicy is one validated policy of a kernel policy directory.
type DirPolicy struct {
	Descriptor
	// File is the descriptor's path, ObjectPath the object's.
	File       string
	ObjectPath string
	object     []byte
}

// Kind is the struct_ops type the policy attaches as.
func (p *DirPolicy) KernelKind() Kind {
	if p.Kind == "scheduling" {
		return KindSched
	}
	return KindMemory
}

// Spec parses the policy's object afresh (a spec is changed by loading).
func (p *DirPolicy) Spec() (*ebpf.CollectionSpec, error) {
	return parseObject(p.ObjectPath, p.object)
}

// Dir is a loaded kernel policy directory.
type Dir struct {
	Path     string
	policies map[string]*DirPolicy
}

// Names lists the directory's policies, sorted.
func (d *Dir) Names() []string {
	if d == nil {
		return nil
	}
	names := make([]string, 0, len(d.policies))
	for n := range d.policies {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Get returns the named policy.
func (d *Dir) Get(name string) (*DirPolicy, bool) {
	if d == nil {
		return nil, false
	}
	p, ok := d.policies[name]
	return p, ok
}

// Algorithms are the directory's memory policies as eviction and prefetch
// algorithms of the policy model.
func (d *Dir) Algorithms() policies.Algorithms {
	var a policies.Algorithms
	for _, name := range d.Names() {
		p := d.policies[name]
		for _, k := range []struct {
			desc *AlgorithmDescriptor
			dst  *[]policies.AlgorithmSpec
		}{{p.Eviction, &a.Eviction}, {p.Prefetch, &a.Prefetch}} {
			if k.desc == nil {
				continue
			}
			spec := policies.AlgorithmSpec{Name: p.Name, Doc: k.desc.Doc, Source: p.File}
			if spec.Doc == "" {
				spec.Doc = p.Description
			}
			if pp := k.desc.Param; pp != nil {
				spec.Params = []policies.ParamSpec{{Name: pp.Name, Min: pp.Min, Max: pp.Max, Default: pp.Default, Doc: pp.Doc}}
			}
			*k.dst = append(*k.dst, spec)
		}
	}
	return a
}

// LoadDir reads every NAME.json of dir and the object each names. Nothing
// is followed through a symlink, every read is bounded, decoding is strict,
// and each object is checked against its descriptor (the struct_ops type,
// the hooks it implements, the ABI version it was built for). Every error
// names the file and, where there is one, the field.
func LoadDir(dir string) (*Dir, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("kernel policy dir: %w", err)
	}
	defer root.Close()
	entries, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return nil, fmt.Errorf("kernel policy dir %s: %w", dir, err)
	}
	d := &Dir{Path: dir, policies: map[string]*DirPolicy{}}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if len(d.policies) == MaxDirPolicies {
			return nil, fmt.Errorf("kernel policy dir %s: more than %d policies: %w", dir, MaxDirPolicies, ErrBadPolicyDir)
		}
		p, err := loadDirPolicy(root, dir, e.Name())
		if err != nil {
			return nil, err
		}
		d.policies[p.Name] = p
	}
	return d, nil
}

func loadDirPolicy(root *os.Root, dir, file string) (*DirPolicy, error) {
	where := path.Join(dir, file)
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: %s: %w", where, fmt.Sprintf(format, args...), ErrBadPolicyDir)
	}
	data, err := tenantfs.ReadRegular(root, file, MaxDescriptorBytes)
	if err != nil {
		return nil, bad("%v", err)
	}
	var desc Descriptor
	if err := strictjson.Decode(data, &desc); err != nil {
		return nil, bad("%v", err)
	}
	if err := desc.validate(strings.TrimSuffix(file, ".json")); err != nil {
		return nil, bad("%v", err)
	}
	obj := desc.objectFile()
	objData, err := tenantfs.ReadRegular(root, obj, MaxObjectBytes)
	if err != nil {
		return nil, bad("object: %v", err)
	}
	p := &DirPolicy{Descriptor: desc, File: where, ObjectPath: path.Join(dir, obj), object: objData}
	spec, err := p.Spec()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if err := checkObject(spec, &p.Descriptor, p.ObjectPath); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return p, nil
}

func (d *Descriptor) objectFile() string {
	if d.Object != "" {
		return d.Object
	}
	return d.Name + ".bpf.o"
}

// validate checks a descriptor; errors name the field.
func (d *Descriptor) validate(fileName string) error {
	if !dirNameRE.MatchString(d.Name) {
		return fmt.Errorf("name: %q must match %s (its ops name must fit %d bytes)", d.Name, dirNameRE, bpf.MaxOpsNameLen)
	}
	if d.Name != fileName {
		return fmt.Errorf("name: %q must match the file name %q", d.Name, fileName)
	}
	if err := checkNameFree(d.Name); err != nil {
		return fmt.Errorf("name: %w", err)
	}
	if d.Object != "" && !objectRE.MatchString(d.Object) {
		return fmt.Errorf("object: %q must be a file name in the directory ending in .o (%s)", d.Object, objectRE)
	}
	switch d.Kind {
	case "memory":
		if d.Eviction == nil && d.Prefetch == nil {
			return fmt.Errorf("kind: a memory policy needs eviction or prefetch (or both)")
		}
		if len(d.Classes) > 0 {
			return fmt.Errorf("classes: only a scheduling policy claims classes")
		}
		for _, a := range []struct {
			field string
			desc  *AlgorithmDescriptor
		}{{"eviction", d.Eviction}, {"prefetch", d.Prefetch}} {
			if a.desc == nil || a.desc.Param == nil {
				continue
			}
			if err := a.desc.Param.validate(); err != nil {
				return fmt.Errorf("%s.param.%w", a.field, err)
			}
		}
	case "scheduling":
		if d.Eviction != nil || d.Prefetch != nil {
			field := "eviction"
			if d.Eviction == nil {
				field = "prefetch"
			}
			return fmt.Errorf("%s: a scheduling policy provides no memory algorithm", field)
		}
		if len(d.Classes) == 0 {
			return fmt.Errorf("classes: a scheduling policy claims at least one priority class (%s)", classNames())
		}
		for i, c := range d.Classes {
			if !c.Valid() {
				return fmt.Errorf("classes[%d]: unknown priority class %q (want one of: %s)", i, c, classNames())
			}
			if slices.Contains(d.Classes[:i], c) {
				return fmt.Errorf("classes[%d]: %q listed twice", i, c)
			}
		}
	default:
		return fmt.Errorf("kind: %q is not a policy kind (want memory or scheduling)", d.Kind)
	}
	return nil
}

func (p *ParamDescriptor) validate() error {
	if !paramNameRE.MatchString(p.Name) {
		return fmt.Errorf("name: %q must match %s", p.Name, paramNameRE)
	}
	if p.Min < 1 {
		return fmt.Errorf("min: %d is below 1 (the tenant config's 0 means no parameter)", p.Min)
	}
	if p.Max < p.Min {
		return fmt.Errorf("max: %d is below min %d", p.Max, p.Min)
	}
	if p.Default != 0 && (p.Default < p.Min || p.Default > p.Max) {
		return fmt.Errorf("default: %d is out of range %d..%d", p.Default, p.Min, p.Max)
	}
	return nil
}

func classNames() string {
	s := make([]string, len(policies.Classes))
	for i, c := range policies.Classes {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}

// checkNameFree refuses a directory policy name that a built-in policy (or
// its ops name) already has.
func checkNameFree(name string) error {
	ops := bpf.OpsName(name)
	for _, specs := range [][]policies.AlgorithmSpec{policies.EvictionAlgorithms, policies.PrefetchAlgorithms} {
		for _, s := range specs {
			if s.Name == name {
				return fmt.Errorf("%q is a built-in algorithm", name)
			}
		}
	}
	for n, e := range catalog {
		if n == name || e.ops == ops {
			return fmt.Errorf("%q is a built-in kernel policy (ops %q)", name, e.ops)
		}
	}
	return nil
}

// parseObject parses a BPF object, with a message for what cilium/ebpf refuses.
func parseObject(file string, data []byte) (*ebpf.CollectionSpec, error) {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("object %s: not a BPF ELF object: %v: %w", file, err, ErrBadPolicyDir)
	}
	if f.Machine != elf.EM_BPF {
		return nil, fmt.Errorf("object %s: ELF for %s, not BPF (build with clang --target=bpf): %w", file, f.Machine, ErrBadPolicyDir)
	}
	// Ops in the legacy .struct_ops section (gpu_ext's policies) are read
	// as .struct_ops.link: attached through a link like every other (legacy.go).
	if data, _, err = legacyAsLink(data); err != nil {
		return nil, fmt.Errorf("object %s: its ops are in the legacy .struct_ops section, which cannot be read as .struct_ops.link: %v: %w", file, err, ErrBadPolicyDir)
	}
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("object %s: %v: %w", file, err, ErrBadPolicyDir)
	}
	return spec, nil
}

// Struct_ops type names and the members a kind's hooks are.
const (
	memOpsType   = "gpuext_mem_ops"
	schedOpsType = "gpuext_sched_ops"
)

// checkObject checks spec against d: the ABI version it was built for, one
// struct_ops map of d's kind, the hooks the descriptor promises; it then
// sets the ops name (and a scheduling policy's classes) from d, so the
// descriptor is what the core sees.
func checkObject(spec *ebpf.CollectionSpec, d *Descriptor, file string) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("object %s: %s: %w", file, fmt.Sprintf(format, args...), ErrBadPolicyDir)
	}
	v, ok := spec.Variables[ABIVariable]
	if !ok {
		return bad("no %s: it was not built with the gpuext SDK (gpuext_policy.h's GPUEXT_POLICY_ABI records the ABI version)", ABIVariable)
	}
	var abi uint32
	if err := v.Get(&abi); err != nil {
		return bad("%s: %v", ABIVariable, err)
	}
	if abi != bpf.ABIVersion {
		return fmt.Errorf("object %s was built for gpuext ABI version %d, this gpuext has ABI version %d: rebuild it against this release's SDK (make sdk): %w",
			file, abi, bpf.ABIVersion, ErrABIMismatch)
	}
	ms, err := opsMapSpec(spec)
	if err != nil {
		return bad("%v", err)
	}
	st := ms.Value.(*btf.Struct)
	want := memOpsType
	if d.Kind == "scheduling" {
		want = schedOpsType
	}
	if st.Name != want {
		return bad("its ops %s are struct %s, a %s policy is struct %s", ms.Name, st.Name, d.Kind, want)
	}
	hooks := map[string]bool{}
	for _, p := range spec.Programs {
		if p.Type == ebpf.StructOps && strings.HasPrefix(p.AttachTo, st.Name+":") {
			hooks[strings.TrimPrefix(p.AttachTo, st.Name+":")] = true
		}
	}
	if d.Kind == "memory" {
		for _, h := range []struct {
			hook string
			desc *AlgorithmDescriptor
		}{{"evict_prepare", d.Eviction}, {"prefetch", d.Prefetch}} {
			field := strings.TrimSuffix(h.hook, "_prepare")
			switch {
			case h.desc != nil && !hooks[h.hook]:
				return bad("the descriptor has %s but the ops %s set no .%s", field, ms.Name, h.hook)
			case h.desc == nil && hooks[h.hook]:
				return bad("the ops %s set .%s but the descriptor has no %s: tenants could never name it", ms.Name, h.hook, field)
			}
		}
	} else if !hooks["tsg_init"] && !hooks["tsg_bind"] {
		return bad("the ops %s set neither .tsg_init nor .tsg_bind", ms.Name)
	}
	if err := setMember(ms, "name", opsNameBytes(bpf.OpsName(d.Name))); err != nil {
		return bad("%v", err)
	}
	if d.Kind == "scheduling" {
		var mask uint32
		for _, c := range d.Classes {
			mask |= 1 << classIndex(c)
		}
		old, err := member(ms, "classes")
		if err != nil {
			return bad("%v", err)
		}
		if got := leUint32(old); got != 0 && got != mask {
			return bad("its ops claim classes %#x, the descriptor's classes are %#x (%v)", got, mask, d.Classes)
		}
		if err := setMember(ms, "classes", []byte{byte(mask), byte(mask >> 8), byte(mask >> 16), byte(mask >> 24)}); err != nil {
			return bad("%v", err)
		}
	}
	return nil
}

// opsMapSpec returns the object's one struct_ops map.
func opsMapSpec(spec *ebpf.CollectionSpec) (*ebpf.MapSpec, error) {
	var found *ebpf.MapSpec
	for _, name := range sortedMapNames(spec) {
		ms := spec.Maps[name]
		if ms.Type != ebpf.StructOpsMap {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("two struct_ops maps (%s, %s): a policy object holds one", found.Name, ms.Name)
		}
		found = ms
	}
	if found == nil {
		return nil, fmt.Errorf("no struct_ops map: declare the ops with the SDK's GPUEXT_MEM_OPS or GPUEXT_SCHED_OPS")
	}
	if _, ok := found.Value.(*btf.Struct); !ok || len(found.Contents) != 1 {
		return nil, fmt.Errorf("struct_ops map %s has no struct value", found.Name)
	}
	return found, nil
}

func sortedMapNames(spec *ebpf.CollectionSpec) []string {
	names := make([]string, 0, len(spec.Maps))
	for n := range spec.Maps {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// member returns the bytes of a struct_ops map's member in its contents.
func member(ms *ebpf.MapSpec, name string) ([]byte, error) {
	st := ms.Value.(*btf.Struct)
	val, ok := ms.Contents[0].Value.([]byte)
	if !ok {
		return nil, fmt.Errorf("struct_ops map %s: contents are not bytes", ms.Name)
	}
	for _, m := range st.Members {
		if m.Name != name {
			continue
		}
		size, err := btf.Sizeof(m.Type)
		if err != nil {
			return nil, err
		}
		off := int(m.Offset.Bytes())
		if off+size > len(val) {
			return nil, fmt.Errorf("struct_ops map %s: member %s outside its value", ms.Name, name)
		}
		return val[off : off+size], nil
	}
	return nil, fmt.Errorf("struct %s has no member %s", st.Name, name)
}

func setMember(ms *ebpf.MapSpec, name string, b []byte) error {
	dst, err := member(ms, name)
	if err != nil {
		return err
	}
	if len(b) > len(dst) {
		return fmt.Errorf("member %s: %d bytes, room for %d", name, len(b), len(dst))
	}
	clear(dst)
	copy(dst, b)
	return nil
}

func opsNameBytes(ops string) []byte { return append([]byte(ops), 0) }

func leUint32(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func classIndex(c policies.PriorityClass) int { return slices.Index(policies.Classes, c) }
