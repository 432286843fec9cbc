// Package cgrouptest holds helpers for privileged tests that need real
// cgroup v2 cgroups: it creates temporary cgroups below the host's v2 root,
// starts processes inside them, and removes them when the test ends.
//
// Privileged tests never skip silently in CI: [testutil.RequireRoot] skips without
// root locally and fails the test when CI=true.
package cgrouptest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuext/gpuext/lib/testutil"

	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/cgroup"
)

// V2Root returns the host's cgroup v2 root directory (/sys/fs/cgroup or
// /sys/fs/cgroup/unified). Without a v2 hierarchy it skips the test, or
// fails it when CI=true.
func V2Root(t testing.TB) string {
	t.Helper()
	r, err := cgroup.NewResolver("")
	if err != nil {
		testutil.SkipOrFail(t, "no cgroup hierarchy: %v", err)
	}
	root := r.V2Root()
	if root == "" {
		testutil.SkipOrFail(t, "%v", cgroup.ErrNoV2)
	}
	return root
}

// New creates a temporary cgroup directly below the host's v2 root and
// returns its directory and id. It needs root (testutil.RequireRoot). When the
// test ends, the cgroup and any child cgroups the test made in it are
// removed; processes still in them are moved to the v2 root first.
func New(t testing.TB) (dir string, id cgroup.ID) {
	t.Helper()
	testutil.RequireRoot(t)
	root := V2Root(t)
	dir, err := os.MkdirTemp(root, "gpuext-test-")
	if err != nil {
		t.Fatalf("create test cgroup: %v", err)
	}
	t.Cleanup(func() {
		if err := Remove(dir, root); err != nil {
			t.Errorf("remove test cgroup: %v", err)
		}
	})
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatalf("stat test cgroup: %v", err)
	}
	return dir, cgroup.ID(st.Ino)
}

// Remove removes the cgroup dir and its descendants, deepest first, after
// moving the processes left in them to the cgroup moveTo. It retries for a
// while when a cgroup is busy (a killed process may still be leaving).
// Removing a cgroup that does not exist is not an error.
func Remove(dir, moveTo string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- { // WalkDir lists parents before children
		if err := removeOne(dirs[i], moveTo); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func removeOne(dir, moveTo string) error {
	var err error
	deadline := time.Now().Add(5 * time.Second)
	for {
		moveProcs(dir, moveTo)
		err = unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", dir, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// moveProcs moves the processes of cgroup dir into cgroup to, one by one
// (cgroup.procs takes one pid a write). Processes that exit meanwhile are
// ignored.
func moveProcs(dir, to string) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, pid := range strings.Fields(string(data)) {
		_ = os.WriteFile(filepath.Join(to, "cgroup.procs"), []byte(pid), 0)
	}
}

// Command returns a command that starts directly inside the v2 cgroup dir
// (clone3 with CLONE_INTO_CGROUP, through SysProcAttr.UseCgroupFD): the
// process never runs outside it. The cgroup's descriptor is closed when the
// test ends.
func Command(t testing.TB, dir, name string, args ...string) *exec.Cmd {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open cgroup %s: %v", dir, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	return cmd
}

// RunIn starts name with args directly inside the v2 cgroup dir and returns
// the running command. When the test ends the process is killed and reaped
// unless the test already waited for it.
func RunIn(t testing.TB, dir, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := Command(t, dir, name, args...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s in cgroup %s: %v", name, dir, err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}
