package bpf

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gpuext/gpuext/lib/testutil"

	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/cgroup"
)

// helperEnv selects a helper-process mode in TestHelperProcess.
const helperEnv = "GPUEXT_BPF_HELPER"

// cgroup2Root is where the privileged tests make their cgroups: the v2
// tree of this host's hybrid layout, or the v2 root of a unified one.
func cgroup2Root(t *testing.T) string {
	t.Helper()
	for _, dir := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		var st unix.Statfs_t
		if unix.Statfs(dir, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return dir
		}
	}
	t.Fatal("no cgroup v2 hierarchy at /sys/fs/cgroup/unified or /sys/fs/cgroup")
	return ""
}

// requireRoot skips a privileged test when not root, unless CI=true, where
// a privileged test that cannot run is a failure.
func requireRoot(t *testing.T) { testutil.RequireRoot(t) }

func randomSuffix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// newPinDir returns a fresh pin dir path under /sys/fs/bpf (not created),
// removed with everything in it when the test ends.
func newPinDir(t *testing.T) string {
	t.Helper()
	if _, err := EnsureBPFFS(BPFFSRoot); err != nil { // what OpenRegistry does on a fresh host
		t.Fatal(err)
	}
	dir := filepath.Join("/sys/fs/bpf", "gpuext-test-"+randomSuffix(t))
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove pin dir: %v", err)
		}
	})
	return dir
}

func openTestRegistry(t *testing.T, dir string) *Registry {
	t.Helper()
	r, err := OpenRegistry(dir)
	if err != nil {
		t.Fatalf("OpenRegistry(%s): %v", dir, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// newTestCgroup makes a cgroup v2 directory, removed when the test ends,
// and returns it with its id (the directory's inode).
func newTestCgroup(t *testing.T) (string, cgroup.ID) {
	t.Helper()
	dir := filepath.Join(cgroup2Root(t), "gpuext-test-"+randomSuffix(t))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("create cgroup: %v", err)
	}
	t.Cleanup(func() {
		var err error
		for range 50 { // the last process may still be leaving
			if err = os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("remove cgroup %s: %v", dir, err)
	})
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	return dir, cgroup.ID(st.Ino)
}

// helperCmd runs this test binary as a helper process in mode.
func helperCmd(t *testing.T, mode string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), helperEnv+"="+mode), env...)
	cmd.Stderr = os.Stderr
	return cmd
}

// inCgroup makes cmd start inside the cgroup v2 directory dir (clone3
// CLONE_INTO_CGROUP: the process never runs outside it).
func inCgroup(t *testing.T, cmd *exec.Cmd, dir string) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = fd
}
