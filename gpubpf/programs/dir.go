package programs

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/verifier"
	"github.com/gpuext/gpuext/lib/strictjson"
	"github.com/gpuext/gpuext/lib/tenantfs"
)

// A probe directory (the config's probeDir) holds device probes that are
// not built in: for each, NAME.json (a catalog entry, the same format as
// catalog/*.json) and the BPF object it names (NAME.bpf.o when "object" is
// left out), built with the SDK (docs/write-a-probe.md). Containers select
// them with probes.gpuext.io like the built-in ones.

// ErrBadProbeDir: an entry of a probe directory is invalid (the error
// names the file and the field, or the program and instruction).
var ErrBadProbeDir = errors.New("bad probe directory entry")

// Limits on what a probe directory may hold.
const (
	MaxDescriptorBytes = 64 << 10
	MaxObjectBytes     = 16 << 20
	MaxDirProbes       = 64
)

var objectRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,200}\.o$`)

// LoadDir reads every NAME.json of dir (a probe directory) and the object
// each names. Nothing is followed through a symlink, every read is bounded
// (MaxDescriptorBytes, MaxObjectBytes, MaxDirProbes), decoding is strict,
// each entry is checked against its object as a built-in one is, and its
// programs are run through the device verifier: an object it refuses, or
// one without a program at a device attach point, is an error naming the
// file, the program and the instruction with its source line. Names a
// built-in probe has are refused (With). The result holds only dir's
// probes; BuiltinWithDir is what selections use.
func LoadDir(dir string) (*Catalog, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("probe dir: %w", err)
	}
	defer root.Close()
	entries, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return nil, fmt.Errorf("probe dir %s: %w", dir, err)
	}
	c := &Catalog{probes: map[string]Probe{}, objects: map[string][]byte{}}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if len(c.probes) == MaxDirProbes {
			return nil, fmt.Errorf("probe dir %s: more than %d probes: %w", dir, MaxDirProbes, ErrBadProbeDir)
		}
		p, obj, err := loadDirProbe(root, dir, e.Name())
		if err != nil {
			return nil, err
		}
		c.probes[p.Name] = p
		c.objects[p.Name] = obj
	}
	return c, nil
}

// dirErr is a probe directory error: the file, then what is wrong; it
// matches ErrBadProbeDir, and ErrBadCatalog or a *verifier.Error where one
// is the cause.
type dirErr struct {
	file string
	err  error
}

func (e *dirErr) Error() string   { return e.file + ": " + e.err.Error() }
func (e *dirErr) Unwrap() []error { return []error{ErrBadProbeDir, e.err} }

func loadDirProbe(root *os.Root, dir, file string) (Probe, []byte, error) {
	where := filepath.Join(dir, file)
	bad := func(err error) (Probe, []byte, error) { return Probe{}, nil, &dirErr{file: where, err: err} }
	data, err := tenantfs.ReadRegular(root, file, MaxDescriptorBytes)
	if err != nil {
		return bad(err)
	}
	var p Probe
	if err := strictjson.Decode(data, &p); err != nil {
		return bad(&fieldErr{msg: err.Error()})
	}
	p.Source = where
	name := strings.TrimSuffix(file, ".json")
	if p.Name != name {
		return bad(catalogErr("name", "%q must match the file name %q", p.Name, name))
	}
	if !NameRE.MatchString(p.Name) {
		return bad(catalogErr("name", "%q must match %s", p.Name, NameRE))
	}
	if _, ok := builtin().probes[p.Name]; ok {
		return bad(catalogErr("name", "%q is a built-in probe: a probe directory adds probes, it does not replace them", p.Name))
	}
	if strings.TrimSpace(p.Description) == "" {
		return bad(catalogErr("description", "is empty"))
	}
	if p.Object == "" {
		p.Object = p.Name + ".bpf.o"
	}
	if !objectRE.MatchString(p.Object) {
		return bad(catalogErr("object", "%q must be a file name in the directory ending in .o (%s)", p.Object, objectRE))
	}
	obj, err := tenantfs.ReadRegular(root, p.Object, MaxObjectBytes)
	if err != nil {
		return bad(catalogErr("object", "%v", err))
	}
	spec, err := parseObject(p.Object, obj)
	if err != nil {
		return bad(err)
	}
	if err := p.selectPrograms(spec); err != nil {
		return bad(err)
	}
	if err := p.check(spec); err != nil {
		return bad(err)
	}
	return p, obj, nil
}

// selectPrograms gives the entry its verdicts: the candidates are the
// programs the descriptor lists, or, when it lists none, every program of
// the object at a device attach point or at one of bpftime's that gpuext
// refuses (abi.RefusedSection). Each candidate is verified on its own
// (verifier.VerifyEach); those that pass become p.Programs (what runs),
// each other one a Refusal with its reason. No program that passes is an
// error naming every refusal, keeping the first verifier error in the
// chain.
func (p *Probe) selectPrograms(spec *ebpf.CollectionSpec) error {
	cand := slices.Clone(p.Programs)
	if len(cand) == 0 {
		for _, pn := range slices.Sorted(maps.Keys(spec.Programs)) {
			sec := spec.Programs[pn].SectionName
			_, device := abi.AttachOfSection(sec)
			_, refused := abi.RefusedSection(sec)
			if device || refused {
				cand = append(cand, pn)
			}
		}
		if len(cand) == 0 {
			return catalogErr("object", "%s has no program at a device attach point (%s, %s, %sKERNEL, %sKERNEL)",
				p.Object, abi.SecKernelEntry, abi.SecKernelExit, abi.SecKprobe, abi.SecKretprobe)
		}
	}
	p.Refused = nil
	sub := &ebpf.CollectionSpec{Maps: spec.Maps, Programs: map[string]*ebpf.ProgramSpec{}, Types: spec.Types}
	for i, pn := range cand {
		field := fmt.Sprintf("programs[%d]", i)
		ps, ok := spec.Programs[pn]
		if !ok {
			return catalogErr(field, "%s has no program %q (has: %s)", p.Object, pn, strings.Join(slices.Sorted(maps.Keys(spec.Programs)), ", "))
		}
		if slices.Contains(cand[:i], pn) {
			return catalogErr(field, "program %q listed twice", pn)
		}
		if why, refused := abi.RefusedSection(ps.SectionName); refused {
			p.Refused = append(p.Refused, Refusal{Program: pn, Section: ps.SectionName, Reason: why})
			continue
		}
		if _, ok := abi.AttachOfSection(ps.SectionName); !ok {
			return catalogErr(field, "program %q is in section %q, want %s, %s, %sKERNEL or %sKERNEL",
				pn, ps.SectionName, abi.SecKernelEntry, abi.SecKernelExit, abi.SecKprobe, abi.SecKretprobe)
		}
		sub.Programs[pn] = ps
	}
	var firstErr error
	var runs []string
	if len(sub.Programs) > 0 {
		res, errs, err := verifier.VerifyEach(sub)
		if err != nil {
			return fmt.Errorf("object %s: %w", p.Object, err)
		}
		for _, pn := range cand {
			if e, ok := errs[pn]; ok {
				p.Refused = append(p.Refused, Refusal{Program: pn, Section: spec.Programs[pn].SectionName, Reason: e.Error()})
				if firstErr == nil {
					firstErr = e
				}
			} else if res[pn] != nil {
				runs = append(runs, pn)
			}
		}
	}
	slices.SortFunc(p.Refused, func(a, b Refusal) int { return strings.Compare(a.Program, b.Program) })
	if len(runs) == 0 {
		var why []string
		for _, r := range p.Refused {
			why = append(why, r.String())
		}
		return &noProgramRuns{msg: fmt.Sprintf("no program of %s passes the device verifier: %s", p.Object, strings.Join(why, "; ")), first: firstErr}
	}
	p.Programs = runs
	return nil
}

// ErrNoProgramRuns: every program a probe directory entry selects was
// refused (the error names each and why).
var ErrNoProgramRuns = errors.New("no program passes")

// noProgramRuns names every refusal once and keeps the first verifier
// error (if any) in the chain.
type noProgramRuns struct {
	msg   string
	first error
}

func (e *noProgramRuns) Error() string { return e.msg }
func (e *noProgramRuns) Unwrap() []error {
	if e.first == nil {
		return []error{ErrNoProgramRuns}
	}
	return []error{ErrNoProgramRuns, e.first}
}

// Refusal is a program of a probe's object that does not run, and why: the
// device verifier's error (instruction, file:line, the hazard), or an
// attach point of bpftime's that gpuext does not support.
type Refusal struct {
	Program string `json:"program"`
	Section string `json:"section"`
	Reason  string `json:"reason"`
}

func (r Refusal) String() string {
	return fmt.Sprintf("program %s (section %q) refused: %s", r.Program, r.Section, r.Reason)
}

// parseObject parses a BPF object, with a message for what is not one.
func parseObject(file string, data []byte) (*ebpf.CollectionSpec, error) {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, catalogErr("object", "%s is not a BPF ELF object: %v", file, err)
	}
	if f.Machine != elf.EM_BPF {
		return nil, catalogErr("object", "%s is ELF for %s, not BPF (build with clang --target=bpf; the SDK's probe.mk does)", file, f.Machine)
	}
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(data))
	if err != nil {
		return nil, catalogErr("object", "%s: %v", file, err)
	}
	return spec, nil
}

// With returns a catalog holding c's probes and extra's (a probe
// directory's). A name, map or program of extra that one of c's probes
// already has is an error naming both: the selected probes are merged
// into one module, where two maps or programs of one name cannot live, so
// the clash is refused when the directory loads, not when a container
// happens to select both.
func (c *Catalog) With(extra *Catalog) (*Catalog, error) {
	m := &Catalog{probes: maps.Clone(c.probes), objects: maps.Clone(c.objects)}
	if extra == nil {
		return m, nil
	}
	owner := func(kind string) map[string]string {
		out := map[string]string{}
		for _, name := range m.Names() {
			spec, err := m.Spec(name)
			if err != nil {
				continue
			}
			if kind == "map" {
				for mn := range spec.Maps {
					out[mn] = name
				}
			} else {
				for _, pn := range m.probes[name].Programs {
					out[pn] = name
				}
			}
		}
		return out
	}
	mapOwner, progOwner := owner("map"), owner("program")
	for _, name := range extra.Names() {
		p := extra.probes[name]
		if old, ok := m.probes[name]; ok {
			return nil, &dirErr{file: p.Source, err: catalogErr("name", "%q is already a probe (%s)", name, sourceOf(old))}
		}
		spec, err := extra.Spec(name)
		if err != nil {
			return nil, err
		}
		for _, mn := range slices.Sorted(maps.Keys(spec.Maps)) {
			if other, ok := mapOwner[mn]; ok {
				return nil, &dirErr{file: p.Source, err: catalogErr("object", "map %q is also a map of probe %q (%s): probes selected together share one module, rename it",
					mn, other, sourceOf(m.probes[other]))}
			}
			mapOwner[mn] = name
		}
		for _, pn := range p.Programs {
			if other, ok := progOwner[pn]; ok {
				return nil, &dirErr{file: p.Source, err: catalogErr("programs", "program %q is also a program of probe %q (%s): probes selected together share one module, rename it",
					pn, other, sourceOf(m.probes[other]))}
			}
			progOwner[pn] = name
		}
		m.probes[name] = p
		m.objects[name] = extra.objects[name]
	}
	return m, nil
}

func sourceOf(p Probe) string {
	if strings.HasPrefix(p.Source, "catalog/") {
		return "built in"
	}
	return p.Source
}

// BuiltinWithDir is the built-in catalog with dir's probes (LoadDir, then
// With): the catalog a probeDir configures.
func BuiltinWithDir(dir string) (*Catalog, error) {
	d, err := LoadDir(dir)
	if err != nil {
		return nil, err
	}
	return Builtin().With(d)
}
