package cgroup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

var (
	// ErrNoV2 means the host has no cgroup v2 hierarchy (cgroup v1 only), so a
	// cgroup has no v2 id.
	ErrNoV2 = errors.New("no cgroup v2 hierarchy on this host (cgroup v1 only): cgroup ids need cgroup v2 or hybrid mode")
	// ErrNotExist means the cgroup's v2 directory does not exist (yet). It is
	// returned together with the resolved path, so a caller may retry.
	ErrNotExist = errors.New("cgroup does not exist")
	// ErrInvalidPath means a cgroups path or cgroup file is malformed.
	ErrInvalidPath = errors.New("invalid cgroup path")
	// ErrRootCgroup means a container resolved to the root cgroup, which holds
	// every process not in a container; it is never a container's own cgroup
	// (on a hybrid host it usually means the runtime did not join the v2 tree).
	ErrRootCgroup = errors.New("resolves to the root cgroup, not a container cgroup")
	// ErrNoHierarchy means no cgroup file system was found under the host root.
	ErrNoHierarchy = errors.New("no cgroup hierarchy found")
)

// Where cgroups are mounted, relative to the host root.
const (
	CgroupMount     = "/sys/fs/cgroup"
	HybridV2Mount   = "/sys/fs/cgroup/unified"
	defaultSlice    = "system.slice"
	rootSliceDash   = "-"
	rootSliceName   = "-.slice"
	sliceSuffix     = ".slice"
	scopeSuffix     = ".scope"
	procsFile       = "cgroup.procs"
	controllersFile = "cgroup.controllers"
)

// String returns "v1", "v2", "hybrid" or "unknown".
func (l Layout) String() string {
	switch l {
	case LayoutV1:
		return "v1"
	case LayoutV2:
		return "v2"
	case LayoutHybrid:
		return "hybrid"
	}
	return "unknown"
}

// Resolver resolves containers to cgroups on one host. It may be built by
// [NewResolver] (layout detected) or as a literal; a literal whose Layout is
// LayoutUnknown detects the layout on every call. A Resolver is not changed
// by its methods and is safe for concurrent use.
type Resolver struct {
	// HostRoot is the prefix under which the host's /sys and /proc are
	// found; "" or "/" is the real host.
	HostRoot string
	// Layout is how cgroups are mounted.
	Layout Layout
	// V2Mount is where the v2 hierarchy is mounted, relative to HostRoot;
	// "" means the default for Layout (/sys/fs/cgroup for LayoutV2,
	// /sys/fs/cgroup/unified for LayoutHybrid). Ignored for LayoutV1.
	V2Mount string
}

// NewResolver detects the cgroup layout below hostRoot ("" or "/" for the
// real host) and returns a resolver for it. A v1-only host is not an error:
// its resolver resolves paths, and ids fail with ErrNoV2.
func NewResolver(hostRoot string) (*Resolver, error) {
	l, v2, err := DetectLayout(hostRoot)
	if err != nil {
		return nil, err
	}
	return &Resolver{HostRoot: hostRoot, Layout: l, V2Mount: v2}, nil
}

// DetectLayout reports how cgroups are mounted below hostRoot and where the
// v2 hierarchy is, relative to hostRoot ("" for LayoutV1).
//
// A directory is a v2 root when its file system is cgroup2, or, when it is
// not a cgroup file system at all (a fixture tree), when it holds
// cgroup.controllers. /sys/fs/cgroup being v2 means LayoutV2; otherwise
// /sys/fs/cgroup/unified being v2 means LayoutHybrid; otherwise a v1
// hierarchy (a cgroup v1 mount or a directory holding cgroup.procs) at or
// directly below /sys/fs/cgroup means LayoutV1.
func DetectLayout(hostRoot string) (Layout, string, error) {
	base := hostPath(hostRoot, CgroupMount)
	fi, err := os.Stat(base)
	if errors.Is(err, fs.ErrNotExist) {
		return LayoutUnknown, "", fmt.Errorf("detect cgroup layout: %w: %w", ErrNoHierarchy, err)
	}
	if err != nil {
		return LayoutUnknown, "", fmt.Errorf("detect cgroup layout: %w", err)
	}
	if !fi.IsDir() {
		return LayoutUnknown, "", fmt.Errorf("detect cgroup layout: %s: %w", base, ErrNoHierarchy)
	}
	if isV2Root(base) {
		return LayoutV2, CgroupMount, nil
	}
	if isV2Root(hostPath(hostRoot, HybridV2Mount)) {
		return LayoutHybrid, HybridV2Mount, nil
	}
	if isV1Hierarchy(base) {
		return LayoutV1, "", nil
	}
	entries, err := os.ReadDir(base)
	if err != nil {
		return LayoutUnknown, "", fmt.Errorf("detect cgroup layout: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() && isV1Hierarchy(filepath.Join(base, e.Name())) {
			return LayoutV1, "", nil
		}
	}
	return LayoutUnknown, "", fmt.Errorf("detect cgroup layout: %s: %w", base, ErrNoHierarchy)
}

func fsMagic(dir string) (int64, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Type), true
}

func isV2Root(dir string) bool {
	magic, ok := fsMagic(dir)
	if !ok {
		return false
	}
	switch magic {
	case unix.CGROUP2_SUPER_MAGIC:
		return true
	case unix.CGROUP_SUPER_MAGIC:
		return false
	}
	return isFile(filepath.Join(dir, controllersFile))
}

func isV1Hierarchy(dir string) bool {
	magic, ok := fsMagic(dir)
	if !ok {
		return false
	}
	switch magic {
	case unix.CGROUP_SUPER_MAGIC:
		return true
	case unix.CGROUP2_SUPER_MAGIC:
		return false
	}
	return isFile(filepath.Join(dir, procsFile)) && !isFile(filepath.Join(dir, controllersFile))
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// hostPath joins a host-root prefix and an absolute host path.
func hostPath(hostRoot, p string) string {
	if hostRoot == "" {
		hostRoot = "/"
	}
	return filepath.Join(hostRoot, p)
}

// layout returns the resolver's layout and v2 mount, detecting them when the
// layout is unknown.
func (r *Resolver) layout() (Layout, string, error) {
	l, v2 := r.Layout, r.V2Mount
	if l == LayoutUnknown {
		var err error
		if l, v2, err = DetectLayout(r.HostRoot); err != nil {
			return l, "", err
		}
	}
	switch l {
	case LayoutV1:
		return l, "", nil
	case LayoutV2:
		if v2 == "" {
			v2 = CgroupMount
		}
	case LayoutHybrid:
		if v2 == "" {
			v2 = HybridV2Mount
		}
	default:
		return l, "", fmt.Errorf("cgroup layout %d: %w", l, ErrNoHierarchy)
	}
	return l, v2, nil
}

// V2Root returns the host directory of the cgroup v2 root, with the host-root
// prefix (e.g. /sys/fs/cgroup/unified on a hybrid host), or "" when the host
// has no v2 hierarchy or its layout cannot be detected.
func (r *Resolver) V2Root() string {
	_, v2, err := r.layout()
	if err != nil || v2 == "" {
		return ""
	}
	return hostPath(r.HostRoot, v2)
}

// FromCgroupsPath resolves an OCI/NRI Linux.CgroupsPath.
//
// Accepted forms:
//   - cgroupfs, absolute: "/kubepods/besteffort/pod<uid>/<id>";
//   - cgroupfs, relative: "mycontainer". runc places it relative to its own
//     cgroup; gpuext cannot know that cgroup, so the path is taken relative to
//     the v2 root ("/mycontainer"). Prefer absolute paths.
//   - systemd, "slice:prefix:name": the slice is expanded as systemd does
//     ("a-b.slice" is "/a.slice/a-b.slice"; "" is "system.slice"; "-" and
//     "-.slice" are the root) and the unit "prefix-name.scope" is placed
//     in it; a name ending in ".slice" is used as the unit as is.
//
// The returned Cgroup always has Path (and V2Dir when the host has a v2 tree)
// when the input is well formed. When the cgroup does not exist yet, ID is 0
// and the error wraps ErrNotExist (and fs.ErrNotExist). On a v1-only host the
// error wraps ErrNoV2. A path that resolves to the root cgroup is returned
// with its ID and an error wrapping ErrRootCgroup.
func (r *Resolver) FromCgroupsPath(cgroupsPath string) (Cgroup, error) {
	p, err := ParseCgroupsPath(cgroupsPath)
	if err != nil {
		return Cgroup{}, err
	}
	cg, err := r.lookup(p)
	if err != nil {
		return cg, fmt.Errorf("resolve cgroup %q: %w", cgroupsPath, err)
	}
	if p == "/" {
		return cg, fmt.Errorf("resolve cgroup %q: %w", cgroupsPath, ErrRootCgroup)
	}
	return cg, nil
}

// ParseCgroupsPath turns an OCI Linux.CgroupsPath (cgroupfs or systemd
// "slice:prefix:name" form, see [Resolver.FromCgroupsPath]) into a clean,
// absolute cgroup path, without touching the file system.
func ParseCgroupsPath(cgroupsPath string) (string, error) {
	bad := func(why string) error {
		return fmt.Errorf("resolve cgroup %q: %w: %s", cgroupsPath, ErrInvalidPath, why)
	}
	switch {
	case cgroupsPath == "":
		return "", bad("empty")
	case strings.ContainsRune(cgroupsPath, 0):
		return "", bad("contains a NUL byte")
	case strings.Contains(cgroupsPath, ":"):
		return parseSystemdPath(cgroupsPath, bad)
	}
	if hasDotDot(cgroupsPath) {
		return "", bad(`contains ".."`)
	}
	return filepath.Clean("/" + cgroupsPath), nil
}

func hasDotDot(p string) bool {
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return true
		}
	}
	return false
}

func parseSystemdPath(cgroupsPath string, bad func(string) error) (string, error) {
	parts := strings.Split(cgroupsPath, ":")
	if len(parts) != 3 {
		return "", bad(fmt.Sprintf(`systemd form needs 3 colon-separated parts "slice:prefix:name", got %d`, len(parts)))
	}
	slice, prefix, name := parts[0], parts[1], parts[2]
	if strings.Contains(cgroupsPath, "..") {
		return "", bad(`contains ".."`)
	}
	if strings.Contains(prefix, "/") || strings.Contains(name, "/") {
		return "", bad(`systemd prefix and name must not contain "/"`)
	}
	if name == "" {
		return "", bad("systemd form has an empty name")
	}
	parent, err := ExpandSlice(slice)
	if err != nil {
		return "", bad(err.Error())
	}
	unit := name
	if !strings.HasSuffix(name, sliceSuffix) {
		unit = prefix + "-" + name + scopeSuffix
	}
	return filepath.Join(parent, unit), nil
}

// ExpandSlice returns the cgroup path of a systemd slice:
// "kubepods-besteffort-pod1.slice" is
// "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice".
// "" is the default slice, "system.slice"; "-" and "-.slice" are the root "/".
func ExpandSlice(slice string) (string, error) {
	switch slice {
	case "":
		slice = defaultSlice
	case rootSliceDash, rootSliceName:
		return "/", nil
	}
	stem, ok := strings.CutSuffix(slice, sliceSuffix)
	if !ok {
		return "", fmt.Errorf("slice %q does not end in %q", slice, sliceSuffix)
	}
	switch {
	case stem == "":
		return "", fmt.Errorf("slice %q has an empty name", slice)
	case strings.ContainsAny(stem, "/\x00"):
		return "", fmt.Errorf("slice %q must not contain \"/\"", slice)
	case strings.HasPrefix(stem, "-"), strings.HasSuffix(stem, "-"), strings.Contains(stem, "--"):
		return "", fmt.Errorf("slice %q has an empty component between dashes", slice)
	}
	var b strings.Builder
	for i := range len(stem) {
		if stem[i] == '-' {
			b.WriteString("/" + stem[:i] + sliceSuffix)
		}
	}
	b.WriteString("/" + slice)
	return b.String(), nil
}

// IDOf returns the v2 id of the cgroup at path ("/kubepods/..."; a relative
// path is taken relative to the v2 root).
func (r *Resolver) IDOf(path string) (ID, error) {
	if path == "" || strings.ContainsRune(path, 0) || hasDotDot(path) {
		return 0, fmt.Errorf("resolve cgroup %q: %w", path, ErrInvalidPath)
	}
	cg, err := r.lookup(filepath.Clean("/" + path))
	if err != nil {
		return 0, fmt.Errorf("resolve cgroup %q: %w", path, err)
	}
	return cg.ID, nil
}

// lookup fills V2Dir and ID of a clean absolute cgroup path.
func (r *Resolver) lookup(p string) (Cgroup, error) {
	cg := Cgroup{Path: p}
	_, v2, err := r.layout()
	if err != nil {
		return cg, err
	}
	if v2 == "" {
		return cg, ErrNoV2
	}
	cg.V2Dir = filepath.Join(hostPath(r.HostRoot, v2), p)
	var st unix.Stat_t
	if err := unix.Stat(cg.V2Dir, &st); err != nil {
		perr := &fs.PathError{Op: "stat", Path: cg.V2Dir, Err: err}
		if errors.Is(err, unix.ENOENT) {
			return cg, fmt.Errorf("%w: %w", ErrNotExist, perr)
		}
		return cg, perr
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return cg, fmt.Errorf("%s: %w: not a directory", cg.V2Dir, ErrInvalidPath)
	}
	cg.ID = ID(st.Ino)
	return cg, nil
}

// FromPid resolves the cgroup of a host pid from /proc/PID/cgroup.
//
// On a v2 or hybrid host the "0::" line gives the path, and the ID is the
// inode of its v2 directory. On a v1-only host the name=systemd (else the
// memory) hierarchy gives the path, and the error wraps ErrNoV2. A missing
// pid gives an error wrapping fs.ErrNotExist; a process in the root v2
// cgroup gives its Cgroup and an error wrapping ErrRootCgroup.
func (r *Resolver) FromPid(pid int) (Cgroup, error) {
	if pid <= 0 {
		return Cgroup{}, fmt.Errorf("resolve cgroup of pid %d: %w: pid must be positive", pid, ErrInvalidPath)
	}
	l, _, err := r.layout()
	if err != nil {
		return Cgroup{}, fmt.Errorf("resolve cgroup of pid %d: %w", pid, err)
	}
	file := hostPath(r.HostRoot, filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	data, err := os.ReadFile(file)
	if err != nil {
		return Cgroup{}, fmt.Errorf("resolve cgroup of pid %d: %w", pid, err)
	}
	lines, err := ParseProcCgroup(data)
	if err != nil {
		return Cgroup{}, fmt.Errorf("resolve cgroup of pid %d: %s: %w", pid, file, err)
	}
	if l == LayoutV1 {
		p, ok := pickV1(lines)
		if !ok {
			return Cgroup{}, fmt.Errorf("resolve cgroup of pid %d: %s: %w: no name=systemd or memory hierarchy", pid, file, ErrInvalidPath)
		}
		return Cgroup{Path: p}, fmt.Errorf("resolve cgroup of pid %d: %w", pid, ErrNoV2)
	}
	var p string
	found := false
	for _, ln := range lines {
		if ln.HierarchyID == 0 {
			p, found = ln.Path, true
			break
		}
	}
	if !found {
		return Cgroup{}, fmt.Errorf("resolve cgroup of pid %d: %s: %w: no \"0::\" (cgroup v2) line", pid, file, ErrInvalidPath)
	}
	cg, err := r.lookup(p)
	if err != nil {
		return cg, fmt.Errorf("resolve cgroup of pid %d: %w", pid, err)
	}
	if p == "/" {
		return cg, fmt.Errorf("resolve cgroup of pid %d: %w", pid, ErrRootCgroup)
	}
	return cg, nil
}

// ProcCgroupLine is one line of /proc/PID/cgroup.
type ProcCgroupLine struct {
	HierarchyID int      // 0 for the v2 hierarchy
	Controllers []string // empty for v2; "name=systemd" for a named v1 hierarchy
	Path        string   // clean, absolute
}

// ParseProcCgroup parses the contents of /proc/PID/cgroup
// ("hierarchy-ID:controller-list:cgroup-path" lines). Paths outside the
// reader's cgroup namespace ("/../x") are rejected.
func ParseProcCgroup(data []byte) ([]ProcCgroupLine, error) {
	var out []ProcCgroupLine
	for i, line := range strings.Split(string(data), "\n") {
		if line == "" {
			continue
		}
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			return nil, fmt.Errorf("line %d %q: %w: want hierarchy-ID:controllers:path", i+1, line, ErrInvalidPath)
		}
		id, err := strconv.Atoi(f[0])
		if err != nil || id < 0 {
			return nil, fmt.Errorf("line %d %q: %w: bad hierarchy id", i+1, line, ErrInvalidPath)
		}
		if !strings.HasPrefix(f[2], "/") {
			return nil, fmt.Errorf("line %d %q: %w: path is not absolute", i+1, line, ErrInvalidPath)
		}
		if hasDotDot(f[2]) {
			return nil, fmt.Errorf("line %d %q: %w: path is outside this cgroup namespace (run in the host cgroup namespace)", i+1, line, ErrInvalidPath)
		}
		var ctrls []string
		if f[1] != "" {
			ctrls = strings.Split(f[1], ",")
		}
		out = append(out, ProcCgroupLine{HierarchyID: id, Controllers: ctrls, Path: filepath.Clean(f[2])})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no cgroup lines", ErrInvalidPath)
	}
	return out, nil
}

func pickV1(lines []ProcCgroupLine) (string, bool) {
	for _, want := range []string{"name=systemd", "memory"} {
		for _, ln := range lines {
			if ln.HierarchyID != 0 && slices.Contains(ln.Controllers, want) {
				return ln.Path, true
			}
		}
	}
	return "", false
}

// Procs returns the pids listed in the cgroup's cgroup.procs: the processes
// directly in the cgroup, not those of its descendants. It uses c.V2Dir, or
// resolves c.Path when V2Dir is empty.
func (r *Resolver) Procs(c Cgroup) ([]int, error) {
	dir := c.V2Dir
	if dir == "" {
		if c.Path == "" {
			return nil, fmt.Errorf("cgroup procs: %w: empty cgroup", ErrInvalidPath)
		}
		cg, err := r.lookup(filepath.Clean("/" + c.Path))
		if err != nil {
			return nil, fmt.Errorf("cgroup procs %q: %w", c.Path, err)
		}
		dir = cg.V2Dir
	}
	file := filepath.Join(dir, procsFile)
	data, err := os.ReadFile(file)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("cgroup procs %q: %w: %w", c.Path, ErrNotExist, err)
		}
		return nil, fmt.Errorf("cgroup procs %q: %w", c.Path, err)
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("cgroup procs %q: %s: %w: bad pid %q", c.Path, file, ErrInvalidPath, f)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// Contains reports whether pid is directly in the cgroup (listed in its
// cgroup.procs).
func (r *Resolver) Contains(c Cgroup, pid int) (bool, error) {
	pids, err := r.Procs(c)
	if err != nil {
		return false, err
	}
	return slices.Contains(pids, pid), nil
}

// kernfsHandle is the file handle type of cgroupfs (kernfs): the handle of a
// cgroup v2 directory is its 64-bit id, the number bpf_get_current_cgroup_id
// returns (FILEID_KERNFS in the kernel's exportfs.h).
const kernfsHandle = 0xfe

// ExistsByID reports whether a cgroup v2 directory with id exists, found by
// its id alone (open_by_handle_at on the v2 root), not by a path: a stored
// path may be cut to its field size or reused by another cgroup.
func (r *Resolver) ExistsByID(id ID) (bool, error) {
	root, err := unix.Open(r.V2Root(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("open cgroup v2 root %s: %w", r.V2Root(), err)
	}
	defer unix.Close(root)
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], uint64(id))
	fd, err := unix.OpenByHandleAt(root, unix.NewFileHandle(kernfsHandle, b[:]), unix.O_RDONLY|unix.O_CLOEXEC)
	switch {
	case err == nil:
		unix.Close(fd)
		return true, nil
	case errors.Is(err, unix.ESTALE), errors.Is(err, unix.ENOENT):
		return false, nil
	}
	return false, fmt.Errorf("look up cgroup id %d: %w", id, err)
}
