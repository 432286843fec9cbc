package cgroup

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuext/gpuext/lib/testutil"
)

// hostTree is a fixture host root: plain directories and files standing for
// /sys/fs/cgroup and /proc.
type hostTree struct {
	t      *testing.T
	root   string
	layout Layout
}

// newHostTree makes a fixture host root with the marker files of layout.
func newHostTree(t *testing.T, layout Layout) *hostTree {
	t.Helper()
	h := &hostTree{t: t, root: t.TempDir(), layout: layout}
	switch layout {
	case LayoutV2:
		h.write(CgroupMount+"/"+controllersFile, "cpu memory pids\n")
	case LayoutHybrid:
		h.write(HybridV2Mount+"/"+controllersFile, "")
		h.write(CgroupMount+"/memory/"+procsFile, "")
		h.write(CgroupMount+"/systemd/"+procsFile, "")
	case LayoutV1:
		h.write(CgroupMount+"/memory/"+procsFile, "")
		h.write(CgroupMount+"/systemd/"+procsFile, "")
	}
	return h
}

func (h *hostTree) write(p, content string) {
	h.t.Helper()
	full := filepath.Join(h.root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

func (h *hostTree) v2Root() string {
	switch h.layout {
	case LayoutV2:
		return filepath.Join(h.root, CgroupMount)
	case LayoutHybrid:
		return filepath.Join(h.root, HybridV2Mount)
	}
	h.t.Fatalf("layout %v has no v2 root", h.layout)
	return ""
}

// mkcg creates the v2 cgroup directory of cgroup path p and returns its
// directory and inode, as os.Stat reports it.
func (h *hostTree) mkcg(p string) (string, ID) {
	h.t.Helper()
	dir := filepath.Join(h.v2Root(), p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		h.t.Fatal(err)
	}
	return dir, inode(h.t, dir)
}

// procCgroup installs a testdata /proc/PID/cgroup file for pid.
func (h *hostTree) procCgroup(pid int, fixture string) {
	h.t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "proc-cgroup", fixture))
	if err != nil {
		h.t.Fatal(err)
	}
	h.write(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"), string(data))
}

func (h *hostTree) resolver() *Resolver {
	h.t.Helper()
	r, err := NewResolver(h.root)
	if err != nil {
		h.t.Fatalf("NewResolver(%s): %v", h.root, err)
	}
	if r.Layout != h.layout {
		h.t.Fatalf("detected layout %v, want %v", r.Layout, h.layout)
	}
	return r
}

func inode(t *testing.T, p string) ID {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return ID(fi.Sys().(*syscall.Stat_t).Ino)
}

func TestDetectLayout(t *testing.T) {
	for _, l := range []Layout{LayoutV1, LayoutV2, LayoutHybrid} {
		t.Run(l.String(), func(t *testing.T) {
			h := newHostTree(t, l)
			r := h.resolver()
			want := ""
			if l != LayoutV1 {
				want = h.v2Root()
			}
			if got := r.V2Root(); got != want {
				t.Errorf("V2Root() = %q, want %q", got, want)
			}
		})
	}
	t.Run("no hierarchy", func(t *testing.T) {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, CgroupMount), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := NewResolver(root); !errors.Is(err, ErrNoHierarchy) {
			t.Errorf("NewResolver on an empty /sys/fs/cgroup: err = %v, want ErrNoHierarchy", err)
		}
	})
	t.Run("missing root", func(t *testing.T) {
		if _, err := NewResolver(filepath.Join(t.TempDir(), "nope")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("err = %v, want fs.ErrNotExist", err)
		}
	})
}

// TestDetectLayoutRealHost checks detection on this machine against what
// /proc/self/mountinfo says (no root needed).
func TestDetectLayoutRealHost(t *testing.T) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		testutil.SkipOrFail(t, "%v", err)
	}
	defer f.Close()
	want := LayoutUnknown
	v1 := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent maj:min root mountpoint options... - fstype source superopts
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		mnt, fstype := fields[4], fields[sep+1]
		switch {
		case fstype == "cgroup2" && mnt == CgroupMount:
			want = LayoutV2
		case fstype == "cgroup2" && mnt == HybridV2Mount && want != LayoutV2:
			want = LayoutHybrid
		case fstype == "cgroup" && strings.HasPrefix(mnt, CgroupMount+"/"):
			v1 = true
		}
	}
	if want == LayoutUnknown && v1 {
		want = LayoutV1
	}
	if want == LayoutUnknown {
		testutil.SkipOrFail(t, "no cgroup mounts at /sys/fs/cgroup")
	}
	for _, root := range []string{"", "/"} {
		r, err := NewResolver(root)
		if err != nil {
			t.Fatalf("NewResolver(%q): %v", root, err)
		}
		if r.Layout != want {
			t.Errorf("NewResolver(%q).Layout = %v, mountinfo says %v", root, r.Layout, want)
		}
	}
}

func TestExpandSlice(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "/system.slice"},
		{"-", "/"},
		{"-.slice", "/"},
		{"system.slice", "/system.slice"},
		{"kubepods-besteffort-pod123.slice", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod123.slice"},
		{"user-1000.slice", "/user.slice/user-1000.slice"},
	} {
		got, err := ExpandSlice(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ExpandSlice(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"system", ".slice", "a--b.slice", "-a.slice", "a-.slice", "a/b.slice"} {
		if got, err := ExpandSlice(bad); err == nil {
			t.Errorf("ExpandSlice(%q) = %q, want an error", bad, got)
		}
	}
}

func TestFromCgroupsPath(t *testing.T) {
	for _, layout := range []Layout{LayoutV2, LayoutHybrid} {
		t.Run(layout.String(), func(t *testing.T) {
			h := newHostTree(t, layout)
			r := h.resolver()
			for _, tc := range []struct {
				name, in, want string
			}{
				{"cgroupfs", "/kubepods/besteffort/pod123/abc", "/kubepods/besteffort/pod123/abc"},
				{"cgroupfs trailing slash", "/kubepods/burstable/pod9/def/", "/kubepods/burstable/pod9/def"},
				{"cgroupfs runc in hybrid", "/t1", "/t1"},
				{"relative", "mycontainer", "/mycontainer"},
				{"relative nested", "docker/abc", "/docker/abc"},
				{"systemd nested slices", "kubepods-besteffort-pod123.slice:cri-containerd:abc",
					"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod123.slice/cri-containerd-abc.scope"},
				{"systemd docker", "system.slice:docker:0123abcd", "/system.slice/docker-0123abcd.scope"},
				{"systemd default slice", ":runc:ctr1", "/system.slice/runc-ctr1.scope"},
				{"systemd root slice", "-.slice:runc:ctr2", "/runc-ctr2.scope"},
				{"systemd root slice dash", "-:runc:ctr3", "/runc-ctr3.scope"},
				{"systemd name is a slice", "kubepods.slice::kubepods-burstable.slice", "/kubepods.slice/kubepods-burstable.slice"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					dir, id := h.mkcg(tc.want)
					cg, err := r.FromCgroupsPath(tc.in)
					if err != nil {
						t.Fatalf("FromCgroupsPath(%q): %v", tc.in, err)
					}
					want := Cgroup{Path: tc.want, V2Dir: dir, ID: id}
					if cg != want {
						t.Errorf("FromCgroupsPath(%q) = %+v, want %+v", tc.in, cg, want)
					}
					if got, err := r.IDOf(tc.want); err != nil || got != id {
						t.Errorf("IDOf(%q) = %d, %v; want %d", tc.want, got, err, id)
					}
				})
			}
		})
	}
}

func TestFromCgroupsPathMalformed(t *testing.T) {
	r := newHostTree(t, LayoutHybrid).resolver()
	for _, in := range []string{
		"",
		"/a\x00b",
		"/kubepods/../etc",
		"..",
		"a/..",
		"slice:name",                        // 2 colon parts
		"a.slice:b:c:d",                     // 4 colon parts
		"system:docker:abc",                 // slice without .slice
		".slice:docker:abc",                 // empty slice name
		"a--b.slice:docker:abc",             // empty dash component
		"-a.slice:docker:abc",               // leading dash
		"a/b.slice:docker:abc",              // slash in slice
		"system.slice:docker:",              // empty name
		"system.slice:do/cker:abc",          // slash in prefix
		"system.slice:docker:../../x",       // climbs out
		"system.slice:docker:a..b",          // ".." anywhere in systemd form
		"kubepods..slice:docker:abc",        // ".." in slice
		"system.slice:docker:abc\x00.scope", // NUL
	} {
		cg, err := r.FromCgroupsPath(in)
		if err == nil {
			t.Errorf("FromCgroupsPath(%q) = %+v, want an error", in, cg)
			continue
		}
		if !errors.Is(err, ErrInvalidPath) {
			t.Errorf("FromCgroupsPath(%q): err = %v, want ErrInvalidPath", in, err)
		}
		if !strings.Contains(err.Error(), strconv.Quote(in)) {
			t.Errorf("FromCgroupsPath(%q): error %q does not quote the input", in, err)
		}
		if cg != (Cgroup{}) {
			t.Errorf("FromCgroupsPath(%q) = %+v with error, want zero Cgroup", in, cg)
		}
	}
}

func TestFromCgroupsPathNotYet(t *testing.T) {
	h := newHostTree(t, LayoutHybrid)
	r := h.resolver()
	const in = "kubepods-pod1.slice:cri-containerd:new"
	const p = "/kubepods.slice/kubepods-pod1.slice/cri-containerd-new.scope"
	cg, err := r.FromCgroupsPath(in)
	if !errors.Is(err, ErrNotExist) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("FromCgroupsPath(%q) before creation: err = %v, want ErrNotExist and fs.ErrNotExist", in, err)
	}
	if want := (Cgroup{Path: p, V2Dir: filepath.Join(h.v2Root(), p)}); cg != want {
		t.Errorf("FromCgroupsPath(%q) before creation = %+v, want %+v", in, cg, want)
	}
	if _, err := r.IDOf(p); !errors.Is(err, ErrNotExist) {
		t.Errorf("IDOf(%q) before creation: err = %v, want ErrNotExist", p, err)
	}
	// The runtime creates it; a retry resolves it.
	_, id := h.mkcg(p)
	cg, err = r.FromCgroupsPath(in)
	if err != nil || cg.ID != id {
		t.Errorf("FromCgroupsPath(%q) after creation = %+v, %v; want id %d", in, cg, err, id)
	}
}

func TestFromCgroupsPathRoot(t *testing.T) {
	h := newHostTree(t, LayoutV2)
	cg, err := h.resolver().FromCgroupsPath("/")
	if !errors.Is(err, ErrRootCgroup) {
		t.Errorf("FromCgroupsPath(/): err = %v, want ErrRootCgroup", err)
	}
	if want := inode(t, h.v2Root()); cg.ID != want || cg.Path != "/" {
		t.Errorf("FromCgroupsPath(/) = %+v, want path / and id %d", cg, want)
	}
}

func TestV1Only(t *testing.T) {
	h := newHostTree(t, LayoutV1)
	r := h.resolver()
	if got := r.V2Root(); got != "" {
		t.Errorf("V2Root() = %q on v1, want \"\"", got)
	}
	cg, err := r.FromCgroupsPath("/docker/abc")
	if !errors.Is(err, ErrNoV2) {
		t.Errorf("FromCgroupsPath on v1: err = %v, want ErrNoV2", err)
	}
	if want := (Cgroup{Path: "/docker/abc"}); cg != want {
		t.Errorf("FromCgroupsPath on v1 = %+v, want %+v", cg, want)
	}
	if _, err := r.IDOf("/docker/abc"); !errors.Is(err, ErrNoV2) {
		t.Errorf("IDOf on v1: err = %v, want ErrNoV2", err)
	}
	if _, err := r.Procs(cg); !errors.Is(err, ErrNoV2) {
		t.Errorf("Procs on v1: err = %v, want ErrNoV2", err)
	}
}

func TestFromPid(t *testing.T) {
	for _, tc := range []struct {
		name    string
		layout  Layout
		fixture string
		path    string // expected Cgroup.Path
		mkdir   bool   // create the v2 dir: the ID must be its inode
		wantErr error
	}{
		{"hybrid runc", LayoutHybrid, "hybrid-runc.txt", "/t1", true, nil},
		{"hybrid cgroup gone", LayoutHybrid, "hybrid-runc.txt", "/t1", false, ErrNotExist},
		{"hybrid not in v2 tree", LayoutHybrid, "hybrid-notjoined.txt", "/", false, ErrRootCgroup},
		{"v2 systemd", LayoutV2, "v2-systemd.txt",
			"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod123.slice/cri-containerd-abc.scope", true, nil},
		{"v1 name=systemd", LayoutV1, "v1-docker.txt", "/docker/abc", false, ErrNoV2},
		{"v1 memory", LayoutV1, "v1-nosystemd.txt", "/mem/abc", false, ErrNoV2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostTree(t, tc.layout)
			const pid = 4242
			h.procCgroup(pid, tc.fixture)
			var want Cgroup
			switch {
			case tc.mkdir:
				dir, id := h.mkcg(tc.path)
				want = Cgroup{Path: tc.path, V2Dir: dir, ID: id}
			case tc.path == "/":
				want = Cgroup{Path: "/", V2Dir: h.v2Root(), ID: inode(t, h.v2Root())}
			case tc.layout == LayoutV1:
				want = Cgroup{Path: tc.path}
			default:
				want = Cgroup{Path: tc.path, V2Dir: filepath.Join(h.v2Root(), tc.path)}
			}
			cg, err := h.resolver().FromPid(pid)
			if tc.wantErr == nil && err != nil {
				t.Fatalf("FromPid: %v", err)
			}
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("FromPid: err = %v, want %v", err, tc.wantErr)
			}
			if cg != want {
				t.Errorf("FromPid = %+v, want %+v", cg, want)
			}
		})
	}
}

func TestFromPidErrors(t *testing.T) {
	h := newHostTree(t, LayoutHybrid)
	r := h.resolver()
	if _, err := r.FromPid(777); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "pid 777") {
		t.Errorf("FromPid(missing): err = %v, want fs.ErrNotExist naming the pid", err)
	}
	for _, pid := range []int{0, -1} {
		if _, err := r.FromPid(pid); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("FromPid(%d): err = %v, want ErrInvalidPath", pid, err)
		}
	}
	for i, content := range []string{
		"",                        // empty
		"garbage\n",               // no fields
		"x::/a\n",                 // bad hierarchy id
		"0::relative\n",           // path not absolute
		"0::/../../outside\n",     // outside the cgroup namespace
		"4:memory:/a\n1:cpu:/a\n", // hybrid but no 0:: line
	} {
		pid := 1000 + i
		h.write(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"), content)
		if cg, err := r.FromPid(pid); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("FromPid with /proc/pid/cgroup %q = %+v, %v; want ErrInvalidPath", content, cg, err)
		}
	}
}

func TestParseProcCgroup(t *testing.T) {
	lines, err := ParseProcCgroup([]byte("11:cpu,cpuacct:/a/b\n1:name=systemd:/a/b\n0::/a/b:c\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []ProcCgroupLine{
		{HierarchyID: 11, Controllers: []string{"cpu", "cpuacct"}, Path: "/a/b"},
		{HierarchyID: 1, Controllers: []string{"name=systemd"}, Path: "/a/b"},
		{HierarchyID: 0, Path: "/a/b:c"}, // a colon in the path is part of the path
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d", len(lines), len(want))
	}
	for i := range want {
		if lines[i].HierarchyID != want[i].HierarchyID || lines[i].Path != want[i].Path ||
			!slices.Equal(lines[i].Controllers, want[i].Controllers) {
			t.Errorf("line %d = %+v, want %+v", i, lines[i], want[i])
		}
	}
}

func TestProcs(t *testing.T) {
	h := newHostTree(t, LayoutV2)
	r := h.resolver()
	dir, _ := h.mkcg("/pod/ctr")
	h.write(filepath.Join(CgroupMount, "pod/ctr", procsFile), "12\n345\n")
	cg, err := r.FromCgroupsPath("/pod/ctr")
	if err != nil {
		t.Fatal(err)
	}
	pids, err := r.Procs(cg)
	if err != nil || !slices.Equal(pids, []int{12, 345}) {
		t.Errorf("Procs = %v, %v; want [12 345]", pids, err)
	}
	// By path alone.
	if pids, err := r.Procs(Cgroup{Path: "/pod/ctr"}); err != nil || len(pids) != 2 {
		t.Errorf("Procs(path only) = %v, %v", pids, err)
	}
	for pid, want := range map[int]bool{345: true, 34: false, 1: false} {
		if got, err := r.Contains(cg, pid); err != nil || got != want {
			t.Errorf("Contains(%d) = %v, %v; want %v", pid, got, err, want)
		}
	}
	// An empty cgroup.
	h.mkcg("/pod/empty")
	h.write(filepath.Join(CgroupMount, "pod/empty", procsFile), "")
	if pids, err := r.Procs(Cgroup{Path: "/pod/empty"}); err != nil || len(pids) != 0 {
		t.Errorf("Procs(empty) = %v, %v", pids, err)
	}
	// Gone: the caller can tell.
	if _, err := r.Procs(Cgroup{Path: "/pod/gone", V2Dir: filepath.Join(dir, "gone")}); !errors.Is(err, ErrNotExist) {
		t.Errorf("Procs(gone): err = %v, want ErrNotExist", err)
	}
	h.write(filepath.Join(CgroupMount, "pod/ctr", procsFile), "12\nx\n")
	if _, err := r.Procs(cg); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("Procs(malformed): err = %v, want ErrInvalidPath", err)
	}
}

// TestResolverLiteral: a Resolver built as a literal, with an explicit
// layout and a non-default v2 mount, needs no marker files.
func TestResolverLiteral(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "cg2", "a", "b")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &Resolver{HostRoot: root, Layout: LayoutV2, V2Mount: "/cg2"}
	if got, want := r.V2Root(), filepath.Join(root, "cg2"); got != want {
		t.Errorf("V2Root() = %q, want %q", got, want)
	}
	if id, err := r.IDOf("/a/b"); err != nil || id != inode(t, dir) {
		t.Errorf("IDOf(/a/b) = %d, %v; want %d", id, err, inode(t, dir))
	}
	// Unknown layout: detected per call; here there is nothing to detect.
	r = &Resolver{HostRoot: root}
	if _, err := r.IDOf("/a/b"); !errors.Is(err, ErrNoHierarchy) {
		t.Errorf("IDOf with undetectable layout: err = %v, want ErrNoHierarchy", err)
	}
}
