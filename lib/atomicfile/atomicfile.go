package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
)

var seq atomic.Uint64

// Write replaces path with data (mode for a new file). It does not fsync:
// for files on tmpfs, or that are rebuilt after a crash anyway.
func Write(path string, data []byte, mode os.FileMode) error {
	return write(path, data, mode, false)
}

// WriteSync is Write that also syncs the file and its directory, and keeps
// the mode of an existing path.
func WriteSync(path string, data []byte, mode os.FileMode) error {
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	return write(path, data, mode, true)
}

func write(path string, data []byte, mode os.FileMode, sync bool) (err error) {
	tmpName := fmt.Sprintf("%s.gpuext-%d-%d.tmp", path, os.Getpid(), seq.Add(1))
	tmp, err := os.OpenFile(tmpName, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmpName) // no-op after the rename
	if _, err = tmp.Write(data); err == nil && mode&^0o777 == 0 {
		err = tmp.Chmod(mode) // the umask may have narrowed it
	}
	if err == nil && sync {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmpName, path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if sync {
		if d, derr := os.Open(filepath.Dir(path)); derr == nil {
			_ = d.Sync()
			d.Close()
		}
	}
	return nil
}
