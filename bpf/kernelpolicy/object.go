package kernelpolicy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/policies"
)

// ErrVerifier: the kernel's verifier refused a policy program (the error
// holds its log, with the source file and line of each instruction when the
// object has BTF line info, i.e. was built with clang -g as the SDK does).
var ErrVerifier = errors.New("the kernel's verifier refused the policy")

// AttachOptions say how Loader.AttachPolicy attaches.
type AttachOptions struct {
	// Replace: when the name is already attached, swap the new object in
	// atomically (BPF_LINK_UPDATE of the pinned link: the core replaces the
	// ops in place, no tenant sees no policy).  Without it, an attached
	// name is an error.  Either way a new object that fails to load leaves
	// the attached one in place.
	Replace bool
}

// ObjectPolicy makes a DirPolicy of a loose object file (gpuextctl policies
// attach --object FILE): the kind, the hooks and a scheduling policy's
// classes are read from the object; name "" is the file name without
// .bpf.o, '_' as '-'.
func ObjectPolicy(file, name string) (*DirPolicy, error) {
	field := "--name"
	if name == "" {
		field = "the name from the file name (give --name)"
		name = strings.TrimSuffix(strings.TrimSuffix(filepath.Base(file), ".o"), ".bpf")
		name = strings.ReplaceAll(name, "_", "-")
	}
	d := Descriptor{Name: name}
	if !dirNameRE.MatchString(name) {
		return nil, fmt.Errorf("%s: %q must match %s: %w", field, name, dirNameRE, ErrBadPolicyDir)
	}
	if err := checkNameFree(name); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", field, err, ErrBadPolicyDir)
	}
	st, err := os.Lstat(file)
	if err != nil {
		return nil, fmt.Errorf("object: %w", err)
	}
	if !st.Mode().IsRegular() || st.Size() > MaxObjectBytes {
		return nil, fmt.Errorf("object %s: not a regular file of at most %d bytes: %w", file, MaxObjectBytes, ErrBadPolicyDir)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("object: %w", err)
	}
	p := &DirPolicy{File: file, ObjectPath: file, object: data}
	spec, err := parseObject(file, data)
	if err != nil {
		return nil, err
	}
	ms, err := opsMapSpec(spec)
	if err != nil {
		return nil, fmt.Errorf("object %s: %w: %w", file, err, ErrBadPolicyDir)
	}
	typ := ms.Value.(interface{ TypeName() string }).TypeName()
	hook := func(h string) bool {
		for _, p := range spec.Programs {
			if p.Type == ebpf.StructOps && p.AttachTo == typ+":"+h {
				return true
			}
		}
		return false
	}
	switch typ {
	case memOpsType:
		d.Kind = "memory"
		if hook("evict_prepare") {
			d.Eviction = &AlgorithmDescriptor{}
		}
		if hook("prefetch") {
			d.Prefetch = &AlgorithmDescriptor{}
		}
	case schedOpsType:
		d.Kind = "scheduling"
		b, err := member(ms, "classes")
		if err != nil {
			return nil, fmt.Errorf("object %s: %w: %w", file, err, ErrBadPolicyDir)
		}
		mask := leUint32(b)
		for i, c := range policies.Classes {
			if mask&(1<<i) != 0 {
				d.Classes = append(d.Classes, c)
			}
		}
	default:
		return nil, fmt.Errorf("object %s: its ops %s are struct %s, not %s or %s: %w", file, ms.Name, typ, memOpsType, schedOpsType, ErrBadPolicyDir)
	}
	if err := d.validate(name); err != nil {
		return nil, fmt.Errorf("object %s: %w: %w", file, err, ErrBadPolicyDir)
	}
	p.Descriptor = d
	if err := checkObject(spec, &p.Descriptor, file); err != nil {
		return nil, err
	}
	return p, nil
}

// AttachPolicy loads a directory (or loose object) policy, attaches it and
// pins its link under LinksDir as p.Name.  Loading errors say what to do:
// the verifier's log with source lines (ErrVerifier), the ABI versions of
// the object and of this build (ErrABIMismatch), a core that is not loaded
// (ErrNoCore).  Nothing attached changes unless the new object loaded.
func (l *Loader) AttachPolicy(p *DirPolicy, opts AttachOptions) (*Attached, error) {
	name := p.Name
	if err := l.Core.Check(); err != nil {
		return nil, fmt.Errorf("attach %q: %w", name, err)
	}
	path := l.linkPath(name)
	_, statErr := os.Stat(path)
	attached := statErr == nil
	if attached && !opts.Replace {
		return nil, fmt.Errorf("attach %q: already attached (pinned at %s; detach it first, or replace it)", name, path)
	}
	if err := os.MkdirAll(l.LinksDir(), 0o700); err != nil {
		return nil, fmt.Errorf("attach %q: pin dir: %w", name, err)
	}
	spec, err := p.Spec()
	if err != nil {
		return nil, err
	}
	if err := checkObject(spec, &p.Descriptor, p.ObjectPath); err != nil {
		return nil, err
	}
	ms, err := opsMapSpec(spec)
	if err != nil {
		return nil, fmt.Errorf("attach %q: %w", name, err)
	}
	coll, err := loadCollection(name, p.ObjectPath, spec)
	if err != nil {
		return nil, err
	}
	m := coll.Maps[ms.Name]
	if attached {
		if err := l.replace(name, path, m); err != nil {
			coll.Close()
			return nil, err
		}
		return &Attached{Name: name, coll: coll, link: nil, pinned: true}, nil
	}
	lk, err := link.AttachStructOps(link.StructOpsOptions{Map: m})
	if err != nil {
		coll.Close()
		if errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("attach %q: the core already has ops %q (attached by another loader?): %w", name, bpf.OpsName(name), err)
		}
		return nil, fmt.Errorf("attach %q: %w", name, err)
	}
	if err := lk.Pin(path); err != nil {
		lk.Close()
		coll.Close()
		return nil, fmt.Errorf("attach %q: pin link at %s: %w", name, path, err)
	}
	return &Attached{Name: name, coll: coll, link: lk, pinned: true}, nil
}

// loadCollection creates the maps and programs, turning the verifier's
// refusal into ErrVerifier with its whole log.
func loadCollection(name, file string, spec *ebpf.CollectionSpec) (*ebpf.Collection, error) {
	coll, err := ebpf.NewCollection(spec)
	if err == nil {
		return coll, nil
	}
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return nil, fmt.Errorf("load %q (%s): %w:\n%+v", name, file, ErrVerifier, ve)
	}
	if errors.Is(err, ebpf.ErrNotSupported) && strings.Contains(err.Error(), "bpf_struct_ops_") {
		return nil, fmt.Errorf("load %q (%s): %v: %w", name, file, err, ErrNoCore)
	}
	return nil, fmt.Errorf("load %q (%s): %w", name, file, err)
}

// replace swaps the struct_ops map of the link pinned at path for m
// (BPF_LINK_UPDATE); the core's update hook puts the new ops in the old
// ones' place, so a tenant's calls go to one or the other, never to none.
func (l *Loader) replace(name, path string, m *ebpf.Map) error {
	lk, err := link.LoadPinnedLink(path, nil)
	if err != nil {
		return fmt.Errorf("replace %q: %w", name, err)
	}
	defer lk.Close()
	fder, ok := lk.(interface{ FD() int })
	if !ok {
		return fmt.Errorf("replace %q: pinned link has no fd", name)
	}
	if err := linkUpdateMap(fder.FD(), m.FD()); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			return fmt.Errorf("replace %q: the core cannot replace these ops in place (a scheduling policy: detach it, then attach): %w", name, err)
		}
		return fmt.Errorf("replace %q: BPF_LINK_UPDATE: %w", name, err)
	}
	return nil
}

// linkUpdateMap is BPF_LINK_UPDATE with a new map (cilium/ebpf's struct_ops
// link does not offer it): union bpf_attr's link_update is link_fd,
// new_map_fd, flags, old_map_fd.
func linkUpdateMap(linkFD, mapFD int) error {
	const bpfLinkUpdate = 29 // enum bpf_cmd BPF_LINK_UPDATE
	attr := struct{ linkFD, newMapFD, flags, oldMapFD uint32 }{uint32(linkFD), uint32(mapFD), 0, 0}
	_, _, errno := unix.Syscall(unix.SYS_BPF, bpfLinkUpdate, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 {
		return errno
	}
	return nil
}
