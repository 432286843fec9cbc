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
// the pin dir) is emptied and left in place. A dir reached through a
// symbolic link, or a system one, is refused (ownDir): the cleanup never
// leaves the agent's own dirs. Symbolic links, which tenants
// can create in their accounting directories, are removed, never followed.
func CleanNode(pinDir, stateDir string) (removed []string, err error) {
	var errs []error
	for _, dir := range []string{pinDir, stateDir} {
		if dir == "" {
			continue
		}
		if err := ownDir(dir); err != nil {
			errs = append(errs, fmt.Errorf("clean node: refusing to empty %q: %w", dir, err))
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

// ownDir says why dir is not one the agent may empty: a relative path, the
// root or the bpf filesystem's, or a path through a symbolic link (a pin dir
// linked to /sys/fs/bpf would empty every program's pins there).
func ownDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return errors.New("not an absolute path")
	}
	clean := filepath.Clean(dir)
	real, err := filepath.EvalSymlinks(clean)
	if errors.Is(err, os.ErrNotExist) {
		real, err = clean, nil // nothing to empty
	}
	if err != nil {
		return err
	}
	if real != clean {
		return fmt.Errorf("it leads through a symbolic link to %s, which is not the agent's to empty", real)
	}
	if clean == "/" || clean == "/sys/fs/bpf" || clean == "/sys/fs" || clean == "/sys" || clean == "/run" {
		return errors.New("a system directory")
	}
	return nil
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
