package bpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// BPFFSRoot is where a host mounts its bpf filesystem. A pin directory under
// it gets a bpffs mounted here when none is; any other pin directory gets one
// mounted on itself.
const BPFFSRoot = "/sys/fs/bpf"

// EnsureBPFFS makes sure dir is on a bpf filesystem, as cilium's agent does
// on a host whose init system did not mount one (a fresh host here: PID 1 is
// not systemd, /sys/fs/bpf is an empty sysfs directory). When the nearest
// existing ancestor of dir is not on bpffs, it mounts one at BPFFSRoot (dir
// under it) or at dir itself (created 0700), and returns that mount point;
// it returns "" when dir was on bpffs already. The mount has the kernel's
// default root mode (1777, as cilium mounts it); the registry keeps its own
// pin directory 0700 and its pins 0600. Concurrent callers (the agent
// and every hook process) mount once: they serialise on a lock of the mount
// point's directory and look again before mounting. An error wraps ErrPinDir
// and names the directory.
func EnsureBPFFS(dir string) (string, error) {
	dir = filepath.Clean(dir)
	existing := nearestExisting(dir)
	if OnBPFFS(existing) {
		return "", nil
	}
	target := BPFFSMountPoint(dir)
	if err := os.MkdirAll(target, 0o700); err != nil {
		return "", fmt.Errorf("%w: %s is not on a bpf filesystem and %s cannot be created to mount one: %w",
			ErrPinDir, dir, target, err)
	}
	// The lock is taken on the directory under the mount point-to-be: every
	// caller that opened it before the mount shares it; a caller that opens
	// it afterwards finds bpffs and returns above or below.
	d, err := os.Open(target)
	if err != nil {
		return "", fmt.Errorf("%w: open %s: %w", ErrPinDir, target, err)
	}
	defer d.Close()
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		return "", fmt.Errorf("%w: lock %s: %w", ErrPinDir, target, err)
	}
	defer unix.Flock(int(d.Fd()), unix.LOCK_UN) //nolint:errcheck // released on close too
	if OnBPFFS(nearestExisting(dir)) {
		return "", nil // another process mounted it while we waited
	}
	if err := unix.Mount("bpf", target, "bpf", 0, ""); err != nil {
		removeCreated(target, existing) // leave nothing behind on the wrong filesystem
		hint := ""
		if errors.Is(err, unix.EPERM) {
			hint = " (needs CAP_SYS_ADMIN in the host's mount namespace; in a container, mount the host's " + BPFFSRoot + " with rshared propagation)"
		}
		return "", fmt.Errorf("%w: %s is not on a bpf filesystem and mounting one at %s failed: %w%s",
			ErrPinDir, dir, target, err, hint)
	}
	if !OnBPFFS(target) {
		return "", fmt.Errorf("%w: mounted bpf at %s but it does not show as a bpf filesystem", ErrPinDir, target)
	}
	return target, nil
}

// removeCreated removes the empty directories from dir up to, not
// including, existing (those EnsureBPFFS created).
func removeCreated(dir, existing string) {
	for dir != existing && strings.HasPrefix(dir, existing) {
		if os.Remove(dir) != nil {
			return
		}
		dir = filepath.Dir(dir)
	}
}

func nearestExisting(dir string) string {
	for {
		if _, err := os.Stat(dir); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return dir
		}
		dir = parent
	}
}

// BPFFSMountPoint is where EnsureBPFFS mounts a bpf filesystem for pin dir
// dir: BPFFSRoot for a dir under it, else dir itself.
func BPFFSMountPoint(dir string) string {
	dir = filepath.Clean(dir)
	if dir == BPFFSRoot || strings.HasPrefix(dir, BPFFSRoot+"/") {
		return BPFFSRoot
	}
	return dir
}

// OnBPFFS reports whether dir is on a bpf filesystem.
func OnBPFFS(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && uint32(st.Type) == unix.BPF_FS_MAGIC
}
