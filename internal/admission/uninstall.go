package admission

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// CleanNode removes what the agent leaves on a node between restarts: the
// registry's pins (and the kernel policies' pinned links) under pinDir and
// every tenant and accounting directory under stateDir. The agent calls it
// only when it is being uninstalled, never on a restart, which must keep
// every live tenant. Running containers keep running: their bind mounts of
// tenant directories stay valid and the device runtime they loaded stays
// mapped; they lose their policy.
//
// A directory that is a mount point (a hostPath volume, a bpffs mounted on
// the pin dir) is emptied and left in place. Symbolic links, which tenants
// can create in their accounting directories, are removed, never followed.
func CleanNode(pinDir, stateDir string) (removed []string, err error) {
	var errs []error
	for _, dir := range []string{pinDir, stateDir} {
		if dir == "" {
			continue
		}
		if !filepath.IsAbs(dir) || filepath.Clean(dir) == "/" || filepath.Clean(dir) == "/sys/fs/bpf" {
			errs = append(errs, fmt.Errorf("clean node: refusing to empty %q", dir))
			continue
		}
		if dir == stateDir {
			// the tenants' accounting dirs are tmpfs mounts (makeAcctDir)
			ents, _ := os.ReadDir(filepath.Join(dir, stateAcct))
			for _, e := range ents {
				if err := removeAcctDir(filepath.Join(dir, stateAcct, e.Name())); err != nil {
					errs = append(errs, fmt.Errorf("clean node: %w", err))
				}
			}
		}
		n, err := emptyDir(dir)
		if err != nil {
			errs = append(errs, err)
		}
		if n > 0 {
			removed = append(removed, dir)
		}
		if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("clean node: remove %s: %w", dir, err))
		}
	}
	return removed, errors.Join(errs...)
}

// emptyDir removes every entry of dir (lstat-based: links are unlinked).
func emptyDir(dir string) (int, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("clean node: %w", err)
	}
	var errs []error
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("clean node: %w", err))
		}
	}
	return len(ents), errors.Join(errs...)
}
