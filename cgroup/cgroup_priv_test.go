package cgroup_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/cgroup/cgrouptest"
	"github.com/gpuext/gpuext/lib/testutil"
)

// cgPath is the cgroup path of the v2 directory dir.
func cgPath(t *testing.T, dir string) string {
	t.Helper()
	rel, err := filepath.Rel(cgrouptest.V2Root(t), dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		t.Fatalf("%s is not below the v2 root: %v", dir, err)
	}
	return "/" + rel
}

func realResolver(t *testing.T) *cgroup.Resolver {
	t.Helper()
	r, err := cgroup.NewResolver("")
	if err != nil {
		t.Fatalf("NewResolver: %v", err)
	}
	if r.V2Root() != cgrouptest.V2Root(t) {
		t.Fatalf("V2Root() = %q, cgrouptest says %q", r.V2Root(), cgrouptest.V2Root(t))
	}
	return r
}

// TestRealCgroup: a process started in a fresh cgroup resolves, by pid and by
// path, to the id of the cgroup's directory, and is listed in its procs.
func TestRealCgroup(t *testing.T) {
	testutil.RequireRoot(t)
	r := realResolver(t)
	dir, id := cgrouptest.New(t)
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil || cgroup.ID(st.Ino) != id {
		t.Fatalf("cgrouptest.New id %d, inode of %s is %d (%v)", id, dir, st.Ino, err)
	}
	p := cgPath(t, dir)

	cmd := cgrouptest.RunIn(t, dir, "sleep", "60")
	pid := cmd.Process.Pid

	cg, err := r.FromPid(pid)
	if err != nil {
		t.Fatalf("FromPid(%d): %v", pid, err)
	}
	if want := (cgroup.Cgroup{Path: p, V2Dir: dir, ID: id}); cg != want {
		t.Errorf("FromPid(%d) = %+v, want %+v", pid, cg, want)
	}
	byPath, err := r.FromCgroupsPath(p)
	if err != nil || byPath != cg {
		t.Errorf("FromCgroupsPath(%q) = %+v, %v; want %+v", p, byPath, err, cg)
	}
	if got, err := r.IDOf(p); err != nil || got != id {
		t.Errorf("IDOf(%q) = %d, %v; want %d", p, got, err, id)
	}
	pids, err := r.Procs(cg)
	if err != nil || !slices.Equal(pids, []int{pid}) {
		t.Errorf("Procs = %v, %v; want [%d]", pids, err, pid)
	}
	if in, err := r.Contains(cg, pid); err != nil || !in {
		t.Errorf("Contains(%d) = %v, %v; want true", pid, in, err)
	}
	if in, err := r.Contains(cg, os.Getpid()); err != nil || in {
		t.Errorf("Contains(test pid %d) = %v, %v; want false", os.Getpid(), in, err)
	}

	// The process exits: the pid is gone, the cgroup is empty.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if _, err := r.FromPid(pid); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("FromPid(%d) after exit: err = %v, want fs.ErrNotExist", pid, err)
	}
	if pids, err := r.Procs(cg); err != nil || len(pids) != 0 {
		t.Errorf("Procs after exit = %v, %v; want none", pids, err)
	}
}

// TestRealCgroupNotYet: a cgroup that does not exist yet resolves to its path
// with ErrNotExist, and to its id once created.
func TestRealCgroupNotYet(t *testing.T) {
	testutil.RequireRoot(t)
	r := realResolver(t)
	dir, _ := cgrouptest.New(t)
	p := cgPath(t, dir) + "/later"
	cg, err := r.FromCgroupsPath(p)
	if !errors.Is(err, cgroup.ErrNotExist) || cg.ID != 0 || cg.Path != p {
		t.Fatalf("FromCgroupsPath(%q) before mkdir = %+v, %v; want ID 0 and ErrNotExist", p, cg, err)
	}
	if err := os.Mkdir(cg.V2Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(cg.V2Dir, &st); err != nil {
		t.Fatal(err)
	}
	cg, err = r.FromCgroupsPath(p)
	if err != nil || cg.ID != cgroup.ID(st.Ino) {
		t.Errorf("FromCgroupsPath(%q) after mkdir = %+v, %v; want id %d", p, cg, err, st.Ino)
	}
}

// TestCgrouptestCleanup: the cleanup of cgrouptest.New removes nested cgroups
// and moves processes still in them out first.
func TestCgrouptestCleanup(t *testing.T) {
	testutil.RequireRoot(t)
	r := realResolver(t)
	var dir string
	var cmd interface {
		Kill() error
	}
	var pid int
	t.Run("inner", func(t *testing.T) {
		dir, _ = cgrouptest.New(t)
		child := filepath.Join(dir, "child", "grandchild")
		if err := os.MkdirAll(child, 0o755); err != nil {
			t.Fatal(err)
		}
		// Not through RunIn: this process outlives the subtest.
		c := cgrouptest.Command(t, child, "sleep", "60")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		go c.Wait()
		cmd, pid = c.Process, c.Process.Pid
	})
	if dir == "" {
		t.Fatal("inner test made no cgroup")
	}
	defer cmd.Kill()
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cgroup %s still there after cleanup: %v", dir, err)
	}
	cg, err := r.FromPid(pid)
	if !errors.Is(err, cgroup.ErrRootCgroup) || cg.Path != "/" {
		t.Errorf("process left in the cgroup: FromPid = %+v, %v; want moved to the root", cg, err)
	}
}
