package compile

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/gpuext/gpuext/lib/atomicfile"
)

var tmpSeq atomic.Uint64

// Digest identifies the bundle's content (hex, 16 characters).
func (b *Bundle) Digest() string {
	h := sha256.New()
	files := b.Files()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(h, "%s %d\n", n, len(files[n]))
		h.Write(files[n])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// versionDir is where the bundle's files live: a hidden sibling of dir
// named after the content, which dir (a relative symlink) points at.
func versionPrefix(dir string) string { return "." + filepath.Base(dir) + "-" }

// WriteDir installs the bundle at dir (a tenant's probes/ directory) so that
// a reader never sees files of two bundles: the files are written to a new
// sibling directory named after their digest, and dir is a relative symlink
// that is swapped to it with one rename. An unchanged bundle is not
// rewritten. The previous version is kept (a process may be reading it);
// older ones are removed. A plain directory at dir (an older layout) is
// replaced.
func (b *Bundle) WriteDir(dir string) error {
	parent := filepath.Dir(dir)
	name := versionPrefix(dir) + b.Digest()
	target := filepath.Join(parent, name)
	if cur, err := os.Readlink(dir); err == nil && cur == name {
		if _, err := os.Stat(filepath.Join(target, ConfFile)); err == nil {
			return nil // installed
		}
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("probes dir: %w", err)
	}
	if _, err := os.Stat(target); errors.Is(err, fs.ErrNotExist) {
		tmp := fmt.Sprintf("%s.tmp-%d-%d", target, os.Getpid(), tmpSeq.Add(1))
		if err := os.Mkdir(tmp, 0o755); err != nil {
			return fmt.Errorf("probes dir: %w", err)
		}
		for n, data := range b.Files() {
			if err := atomicfile.Write(filepath.Join(tmp, n), data, 0o644); err != nil {
				os.RemoveAll(tmp)
				return fmt.Errorf("probes dir: %w", err)
			}
		}
		if err := os.Chmod(tmp, 0o755); err != nil {
			os.RemoveAll(tmp)
			return fmt.Errorf("probes dir: %w", err)
		}
		if err := os.Rename(tmp, target); err != nil {
			os.RemoveAll(tmp) // another writer installed the same digest first
			if _, serr := os.Stat(target); serr != nil {
				return fmt.Errorf("probes dir: %w", err)
			}
		}
	} else if err != nil {
		return fmt.Errorf("probes dir: %w", err)
	}
	prev, _ := os.Readlink(dir)
	link := fmt.Sprintf("%s.link-%d-%d", filepath.Join(parent, "."+filepath.Base(dir)), os.Getpid(), tmpSeq.Add(1))
	if err := os.Symlink(name, link); err != nil {
		return fmt.Errorf("probes dir: %w", err)
	}
	if err := os.Rename(link, dir); err != nil {
		// dir is a real directory (rename cannot replace one with a link).
		if rmErr := os.RemoveAll(dir); rmErr != nil {
			os.Remove(link)
			return fmt.Errorf("probes dir: %w", rmErr)
		}
		if err := os.Rename(link, dir); err != nil {
			os.Remove(link)
			return fmt.Errorf("probes dir: %w", err)
		}
	}
	removeVersions(dir, name, prev)
	return nil
}

// RemoveDir removes an installed probes directory and its versions (a
// tenant that no longer selects probes). A missing dir is not an error.
func RemoveDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove probes dir: %w", err)
	}
	removeVersions(dir, "", "")
	return nil
}

// removeVersions removes the version directories of dir except those named in keep.
func removeVersions(dir string, keep ...string) {
	parent := filepath.Dir(dir)
	prefix := versionPrefix(dir)
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		n := e.Name()
		// A .tmp- directory may be another writer's install in progress.
		if !strings.HasPrefix(n, prefix) || strings.Contains(n, ".tmp-") || !e.IsDir() {
			continue
		}
		kept := false
		for _, k := range keep {
			kept = kept || (k != "" && n == k)
		}
		if !kept {
			os.RemoveAll(filepath.Join(parent, n))
		}
	}
}
