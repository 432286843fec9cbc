package cgroup

import (
	"errors"
	"fmt"
	"github.com/gpuext/gpuext/cgroup/pcibus"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuext/gpuext/lib/tenantfs"
)

// The kernel's cgroup dmem controller (Linux 6.14+, CONFIG_CGROUP_DMEM)
// accounts device memory per region, a region being what a driver
// registered (NVIDIA's r615+ driver: one "nvidia/<pci bus id>/vidmem" per
// GPU). The v2 root lists the regions in dmem.capacity; each cgroup below it
// has dmem.max (the hard limit: an allocation past it fails), dmem.min,
// dmem.low and dmem.current, one "REGION VALUE" line per region, once dmem
// is in every ancestor's cgroup.subtree_control.

// DmemController is the controller's name in cgroup.controllers.
const DmemController = "dmem"

const (
	dmemCapacityFile   = "dmem.capacity"
	dmemMaxFile        = "dmem.max"
	dmemCurrentFile    = "dmem.current"
	subtreeControlFile = "cgroup.subtree_control"
	// maxDmemFile bounds a read of a dmem or cgroup.* file: the kernel writes
	// one short line per region.
	maxDmemFile = 64 << 10
	// maxDmemRegions bounds the regions parsed from one file.
	maxDmemRegions = 1024
	// maxRegionName bounds a region's name (the kernel's are short:
	// "nvidia/0000:17:00.0/vidmem").
	maxRegionName = 256
)

var (
	// ErrNoDmem means the kernel has no dmem controller (or the v2 root does
	// not offer it): no quota can be held there.
	ErrNoDmem = errors.New("the kernel has no cgroup dmem controller (Linux 6.14+ with CONFIG_CGROUP_DMEM)")
	// ErrBadDmemFile means a dmem file does not read as "REGION VALUE" lines.
	ErrBadDmemFile = errors.New("malformed dmem file")
	ErrBadPCIBusID = pcibus.ErrBad
)

// DmemRegion is one region of dmem.capacity.
type DmemRegion struct {
	Name  string // e.g. "nvidia/0000:17:00.0/vidmem"
	Bytes uint64 // its size
}

// DmemValue is one region's value in dmem.max, dmem.min, dmem.low or
// dmem.current: Bytes, or Unlimited ("max").
type DmemValue struct {
	Bytes     uint64
	Unlimited bool
}

// String is the value as the kernel writes and reads it.
func (v DmemValue) String() string {
	if v.Unlimited {
		return "max"
	}
	return strconv.FormatUint(v.Bytes, 10)
}

// Dmem is what a host's kernel offers for GPU memory quotas.
type Dmem struct {
	// Controller: the v2 root lists dmem in cgroup.controllers.
	Controller bool
	// Regions are the registered regions (dmem.capacity), in its order.
	Regions []DmemRegion
}

// Region returns the region named name.
func (d Dmem) Region(name string) (DmemRegion, bool) {
	i := slices.IndexFunc(d.Regions, func(r DmemRegion) bool { return r.Name == name })
	if i < 0 {
		return DmemRegion{}, false
	}
	return d.Regions[i], true
}

// NormalizePCIBusID is pcibus.Normalize (the hooks' config check uses
// that leaf package without the rest of cgroup).
func NormalizePCIBusID(id string) (string, error) { return pcibus.Normalize(id) }

// NVIDIARegion is the dmem region NVIDIA's r615+ driver registers for the
// GPU at pciBusID (any form NormalizePCIBusID takes).
func NVIDIARegion(pciBusID string) (string, error) {
	id, err := NormalizePCIBusID(pciBusID)
	if err != nil {
		return "", err
	}
	return "nvidia/" + id + "/vidmem", nil
}

// ParseDmemCapacity parses dmem.capacity: "REGION BYTES" lines.
func ParseDmemCapacity(data []byte) ([]DmemRegion, error) {
	var out []DmemRegion
	err := parseDmemLines(data, false, func(name string, v DmemValue) {
		out = append(out, DmemRegion{Name: name, Bytes: v.Bytes})
	})
	return out, err
}

// ParseDmemValues parses dmem.max, dmem.min, dmem.low or dmem.current:
// "REGION BYTES" or "REGION max" lines.
func ParseDmemValues(data []byte) (map[string]DmemValue, error) {
	out := map[string]DmemValue{}
	err := parseDmemLines(data, true, func(name string, v DmemValue) { out[name] = v })
	return out, err
}

// parseDmemLines calls add for each "NAME VALUE" line: at most
// maxDmemRegions distinct names of at most maxRegionName printable bytes,
// VALUE decimal (or "max" when allowMax). Blank lines are skipped; anything
// else is an error naming the line.
func parseDmemLines(data []byte, allowMax bool, add func(string, DmemValue)) error {
	if len(data) > maxDmemFile {
		return fmt.Errorf("%w: %d bytes, more than %d", ErrBadDmemFile, len(data), maxDmemFile)
	}
	seen := map[string]bool{}
	for i, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		bad := func(why string) error {
			shown := line
			if len(shown) > 80 {
				shown = shown[:80] + "..."
			}
			return fmt.Errorf("%w: line %d %q: %s", ErrBadDmemFile, i+1, shown, why)
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return bad("want REGION VALUE")
		}
		name, val := f[0], f[1]
		if len(name) > maxRegionName {
			return bad(fmt.Sprintf("region name longer than %d bytes", maxRegionName))
		}
		if strings.IndexFunc(name, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
			return bad("region name is not printable ASCII")
		}
		if seen[name] {
			return bad("region listed twice")
		}
		if len(seen) == maxDmemRegions {
			return bad(fmt.Sprintf("more than %d regions", maxDmemRegions))
		}
		var v DmemValue
		switch {
		case val == "max" && allowMax:
			v.Unlimited = true
		default:
			n, err := strconv.ParseUint(val, 10, 64)
			if err != nil || strings.HasPrefix(val, "+") {
				return bad("value is not a byte count")
			}
			v.Bytes = n
		}
		seen[name] = true
		add(name, v)
	}
	return nil
}

// v2dir opens the v2 directory of cgroup path p ("/kubepods/...", "" or
// "/" for the root), component by component, never following a link.
func (r *Resolver) v2dir(p string) (*tenantfs.Dir, error) {
	if strings.ContainsRune(p, 0) || hasDotDot(p) {
		return nil, fmt.Errorf("cgroup %q: %w", p, ErrInvalidPath)
	}
	root := r.V2Root()
	if root == "" {
		return nil, ErrNoV2
	}
	rel := strings.TrimPrefix(path.Clean("/"+p), "/")
	d, err := tenantfs.OpenDir(root, rel)
	if err != nil {
		return nil, fmt.Errorf("cgroup %q: %w", p, err)
	}
	return d, nil
}

func readCgroupFile(d *tenantfs.Dir, name string) ([]byte, error) {
	return d.ReadFile(name, maxDmemFile)
}

// Dmem reports whether the host's v2 root offers the dmem controller and
// which regions the drivers registered. A host without it (an older kernel,
// cgroup v1 only) is no error: Controller is false.
func (r *Resolver) Dmem() (Dmem, error) {
	if r.V2Root() == "" {
		return Dmem{}, nil
	}
	d, err := r.v2dir("/")
	if err != nil {
		return Dmem{}, err
	}
	defer d.Close()
	ctrl, err := readCgroupFile(d, controllersFile)
	if err != nil {
		return Dmem{}, fmt.Errorf("cgroup v2 root: %w", err)
	}
	if !slices.Contains(strings.Fields(string(ctrl)), DmemController) {
		return Dmem{}, nil
	}
	capData, err := readCgroupFile(d, dmemCapacityFile)
	if err != nil {
		return Dmem{Controller: true}, fmt.Errorf("cgroup v2 root: %w", err)
	}
	regions, err := ParseDmemCapacity(capData)
	if err != nil {
		return Dmem{Controller: true}, fmt.Errorf("%s/%s: %w", d.Path(), dmemCapacityFile, err)
	}
	return Dmem{Controller: true, Regions: regions}, nil
}

// EnableDmem puts dmem into cgroup.subtree_control of every ancestor of the
// cgroup at p (the root included, p itself not), which is what makes p's
// dmem.max exist; runtimes never do it. It returns the cgroups it changed
// (none when all had it). It fails with ErrNoDmem when the root does not
// offer the controller, and names the cgroup a write failed in (a cgroup
// with processes of its own cannot enable a controller for its children).
func (r *Resolver) EnableDmem(p string) (enabled []string, err error) {
	if strings.ContainsRune(p, 0) || hasDotDot(p) {
		return nil, fmt.Errorf("dmem of cgroup %q: %w", p, ErrInvalidPath)
	}
	clean := path.Clean("/" + p)
	if clean == "/" {
		return nil, fmt.Errorf("dmem of cgroup %q: %w", p, ErrRootCgroup)
	}
	dm, err := r.Dmem()
	if err != nil {
		return nil, err
	}
	if !dm.Controller {
		return nil, ErrNoDmem
	}
	var chain []string
	for anc := path.Dir(clean); ; anc = path.Dir(anc) {
		chain = append([]string{anc}, chain...)
		if anc == "/" {
			break
		}
	}
	for _, anc := range chain {
		changed, err := r.enableIn(anc)
		if err != nil {
			return enabled, err
		}
		if changed {
			enabled = append(enabled, anc)
		}
	}
	return enabled, nil
}

// enableIn adds dmem to one cgroup's cgroup.subtree_control unless it is there.
func (r *Resolver) enableIn(p string) (bool, error) {
	d, err := r.v2dir(p)
	if err != nil {
		return false, err
	}
	defer d.Close()
	have, err := readCgroupFile(d, subtreeControlFile)
	if err != nil {
		return false, fmt.Errorf("enable dmem in cgroup %q: %w", p, err)
	}
	if slices.Contains(strings.Fields(string(have)), DmemController) {
		return false, nil
	}
	if err := d.WriteFile(subtreeControlFile, []byte("+"+DmemController)); err != nil {
		return false, fmt.Errorf("enable dmem in cgroup %q: %w", p, err)
	}
	return true, nil
}

// SetDmemMax writes region's hard limit into dmem.max of the cgroup at p.
// The region must be one of dmem.capacity's (the kernel refuses others).
func (r *Resolver) SetDmemMax(p, region string, v DmemValue) error {
	if region == "" || len(region) > maxRegionName || strings.ContainsAny(region, " \t\n\x00") {
		return fmt.Errorf("dmem.max of cgroup %q: region %q: %w", p, region, ErrBadDmemFile)
	}
	d, err := r.v2dir(p)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.WriteFile(dmemMaxFile, []byte(region+" "+v.String())); err != nil {
		return fmt.Errorf("set dmem.max of cgroup %q, region %s to %s: %w", p, region, v, err)
	}
	return nil
}

// DmemMax reads dmem.max of the cgroup at p.
func (r *Resolver) DmemMax(p string) (map[string]DmemValue, error) {
	return r.dmemValues(p, dmemMaxFile)
}

// DmemCurrent reads dmem.current of the cgroup at p: the bytes charged to
// it and its descendants, per region.
func (r *Resolver) DmemCurrent(p string) (map[string]DmemValue, error) {
	return r.dmemValues(p, dmemCurrentFile)
}

func (r *Resolver) dmemValues(p, file string) (map[string]DmemValue, error) {
	d, err := r.v2dir(p)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	data, err := readCgroupFile(d, file)
	if err != nil {
		return nil, fmt.Errorf("%s of cgroup %q: %w", file, p, err)
	}
	v, err := ParseDmemValues(data)
	if err != nil {
		return nil, fmt.Errorf("%s of cgroup %q: %w", file, p, err)
	}
	return v, nil
}
