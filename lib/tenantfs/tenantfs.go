package tenantfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrRefused is wrapped by every refusal: the entry exists but is not what
// a host reader may open.
var ErrRefused = errors.New("refused")

// The refusals, each wrapping ErrRefused.
var (
	ErrSymlink    = fmt.Errorf("%w: a symbolic link", ErrRefused)
	ErrNotRegular = fmt.Errorf("%w: not a regular file", ErrRefused)
	ErrNotDir     = fmt.Errorf("%w: not a directory", ErrRefused)
	ErrNotFIFO    = fmt.Errorf("%w: not a FIFO", ErrRefused)
	ErrTooBig     = fmt.Errorf("%w: too big", ErrRefused)
	ErrBadName    = fmt.Errorf("%w: not a plain relative path", ErrRefused)
)

// Dir is an open directory; what is opened under it is opened without
// following symbolic links.
type Dir struct {
	fd   int
	path string // for messages
}

// OpenDir opens root, a directory of the host (opened as given: its path
// is the host's, not a tenant's), then each component of rel under it with
// O_NOFOLLOW|O_DIRECTORY. rel is slash-separated and relative, without ".."
// (it names tenant-controlled directories); "" or "." is root itself.
func OpenDir(root, rel string) (*Dir, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	d := &Dir{fd: fd, path: root}
	if rel == "" || rel == "." {
		return d, nil
	}
	defer d.Close()
	return d.OpenDir(rel)
}

// OpenDir opens the directory rel under d, one component at a time, never
// following a link.
func (d *Dir) OpenDir(rel string) (*Dir, error) {
	parts, err := components(rel)
	if err != nil {
		return nil, fmt.Errorf("%s: %q: %w", d.path, rel, err)
	}
	fd, path := d.fd, d.path
	for i, p := range parts {
		next, err := unix.Openat(fd, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		path = filepath.Join(path, p)
		if err != nil {
			err = dirErr(fd, p, err)
		}
		if i > 0 {
			unix.Close(fd)
		}
		if err != nil {
			return nil, pathErr("open", path, err)
		}
		fd = next
	}
	return &Dir{fd: fd, path: path}, nil
}

// dirErr names why a directory component did not open: ELOOP and ENOTDIR
// are the tenant's doing.
func dirErr(parent int, name string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		return ErrSymlink
	case errors.Is(err, unix.ENOTDIR):
		var st unix.Stat_t
		if unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return ErrSymlink
		}
		return ErrNotDir
	}
	return err
}

func components(rel string) ([]string, error) {
	if rel == "" || strings.HasPrefix(rel, "/") {
		return nil, ErrBadName
	}
	parts := strings.Split(rel, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return nil, ErrBadName
		}
	}
	return parts, nil
}

func pathErr(op, path string, err error) error { return &os.PathError{Op: op, Path: path, Err: err} }

// Path is the directory's path, for messages.
func (d *Dir) Path() string { return d.path }

// Close closes the directory.
func (d *Dir) Close() error {
	if d == nil || d.fd < 0 {
		return nil
	}
	err := unix.Close(d.fd)
	d.fd = -1
	return err
}

// Names lists the directory's entries (not "." and ".."), refusing a
// directory of more than limit entries.
func (d *Dir) Names(limit int) ([]string, error) {
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, pathErr("open", d.path, err)
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	var names []string
	for {
		batch, err := f.Readdirnames(256)
		names = append(names, batch...)
		if len(names) > limit {
			return nil, fmt.Errorf("%s: more than %d entries: %w", d.path, limit, ErrTooBig)
		}
		if errors.Is(err, io.EOF) || (err == nil && len(batch) == 0) {
			return names, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read dir %s: %w", d.path, err)
		}
	}
}

// Info is what fstat said about an entry: enough to tell whether a name
// still refers to the file opened earlier.
type Info struct {
	Dev, Ino uint64
	Mode     uint32 // unix.S_IFMT bits included
	Size     int64
}

func infoOf(st *unix.Stat_t) Info {
	return Info{Dev: st.Dev, Ino: st.Ino, Mode: st.Mode, Size: st.Size}
}

// Lstat describes the entry name (one component) without following it.
func (d *Dir) Lstat(name string) (Info, error) {
	if err := plainName(name); err != nil {
		return Info{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Info{}, pathErr("lstat", filepath.Join(d.path, name), err)
	}
	return infoOf(&st), nil
}

func plainName(name string) error {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return fmt.Errorf("%q: %w", name, ErrBadName)
	}
	return nil
}

// File is a file opened under a Dir, for reading with ReadAt (pread).
type File struct {
	fd   int
	path string
	info Info
}

// Open opens the regular file name (one component) of d for reading; a file
// of more than limit bytes is refused (limit < 0: no limit, for a caller that
// reads only a fixed part of it with ReadAt).
func (d *Dir) Open(name string, limit int64) (*File, error) {
	fd, info, err := d.reopen(name, unix.S_IFREG, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	f := &File{fd: fd, path: filepath.Join(d.path, name), info: info}
	if limit >= 0 && info.Size > limit {
		f.Close()
		return nil, fmt.Errorf("%s: %d bytes, more than %d: %w", f.path, info.Size, limit, ErrTooBig)
	}
	return f, nil
}

// reopen opens name O_PATH (opening nothing), checks its type, then opens
// that same inode with flags through /proc/self/fd.
func (d *Dir) reopen(name string, typ uint32, flags int) (int, Info, error) {
	path := filepath.Join(d.path, name)
	if err := plainName(name); err != nil {
		return -1, Info{}, err
	}
	pfd, err := unix.Openat(d.fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, Info{}, pathErr("open", path, err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return -1, Info{}, pathErr("stat", path, err)
	}
	if err := typeErr(st.Mode, typ); err != nil {
		return -1, Info{}, fmt.Errorf("%s: %w", path, err)
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), flags|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, Info{}, pathErr("reopen", path, err)
	}
	var st2 unix.Stat_t
	if err := unix.Fstat(fd, &st2); err != nil || st2.Dev != st.Dev || st2.Ino != st.Ino || typeErr(st2.Mode, typ) != nil {
		unix.Close(fd)
		return -1, Info{}, fmt.Errorf("%s: changed while it was opened: %w", path, ErrRefused)
	}
	return fd, infoOf(&st2), nil
}

func typeErr(mode, want uint32) error {
	switch got := mode & unix.S_IFMT; {
	case got == want:
		return nil
	case got == unix.S_IFLNK:
		return ErrSymlink
	case want == unix.S_IFIFO:
		return ErrNotFIFO
	default:
		return ErrNotRegular
	}
}

// ReadFile reads the regular file name of d, refusing one of more than limit
// bytes (also one that grows past limit while it is read).
func (d *Dir) ReadFile(name string, limit int64) ([]byte, error) {
	f, err := d.Open(name, limit)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadAll(limit)
}

// WriteFile writes data, in one write, to the existing regular file name
// of d (a cgroup interface file such as dmem.max), never through a link; it
// neither creates nor truncates the file.
func (d *Dir) WriteFile(name string, data []byte) error {
	fd, _, err := d.reopen(name, unix.S_IFREG, unix.O_WRONLY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for {
		n, err := unix.Write(fd, data)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return pathErr("write", filepath.Join(d.path, name), err)
		}
		if n != len(data) {
			return pathErr("write", filepath.Join(d.path, name), io.ErrShortWrite)
		}
		return nil
	}
}

// ReadAll reads the whole file from offset 0, refusing more than limit bytes.
func (f *File) ReadAll(limit int64) ([]byte, error) {
	buf := make([]byte, 0, min(f.info.Size, limit)+1) // one byte more: a file that grew past limit shows it
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, int(min(limit+1-int64(len(buf)), int64(max(len(buf), 4096)))))
		}
		n, err := f.ReadAt(buf[len(buf):cap(buf)], int64(len(buf)))
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, fmt.Errorf("%s: more than %d bytes: %w", f.path, limit, ErrTooBig)
		}
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// ReadAt reads len(p) bytes at off with pread. Like io.ReaderAt it returns
// io.EOF with a short count when the file ends first (a tenant may truncate
// it at any time: a short read is the worst that happens).
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	done := 0
	for done < len(p) {
		n, err := unix.Pread(f.fd, p[done:], off+int64(done))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return done, pathErr("read", f.path, err)
		}
		if n == 0 {
			return done, io.EOF
		}
		done += n
	}
	return done, nil
}

// Fd is the file's descriptor (for fcntl locks); it stays valid until Close.
func (f *File) Fd() int { return f.fd }

// Path is the file's path, for messages.
func (f *File) Path() string { return f.path }

// Info is what fstat said when the file was opened.
func (f *File) Info() Info { return f.info }

// Same reports whether the entry name of d is still the inode f has open
// (false once the tenant replaced or removed it).
func (d *Dir) Same(name string, f *File) bool {
	in, err := d.Lstat(name)
	return err == nil && in.Dev == f.info.Dev && in.Ino == f.info.Ino
}

// Close closes the file.
func (f *File) Close() error {
	if f == nil || f.fd < 0 {
		return nil
	}
	err := unix.Close(f.fd)
	f.fd = -1
	return err
}

// Mkfifo creates the FIFO name in d with mode perm unless an entry of that
// name exists (whatever it is: OpenFIFO then says whether it will do).
func (d *Dir) Mkfifo(name string, perm uint32) error {
	if err := plainName(name); err != nil {
		return err
	}
	if err := unix.Mkfifoat(d.fd, name, perm); err != nil && !errors.Is(err, unix.EEXIST) {
		return pathErr("mkfifo", filepath.Join(d.path, name), err)
	}
	return nil
}

// OpenFIFO opens the FIFO name of d read-write and non-blocking: it never
// waits for a peer and, holding a write end itself, never sees end-of-file.
// Wait for it with poll or epoll on Fd; Read never blocks.
func (d *Dir) OpenFIFO(name string) (*File, error) {
	fd, info, err := d.reopen(name, unix.S_IFIFO, unix.O_RDWR)
	if err != nil {
		return nil, err
	}
	return &File{fd: fd, path: filepath.Join(d.path, name), info: info}, nil
}

// Read reads what is there without waiting (a FIFO opened by OpenFIFO): 0
// and nil when nothing is.
func (f *File) Read(p []byte) (int, error) {
	for {
		n, err := unix.Read(f.fd, p)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			return 0, nil
		case err != nil:
			return 0, pathErr("read", f.path, err)
		}
		return n, nil
	}
}

// Chmod sets the file's mode bits.
func (f *File) Chmod(mode uint32) error { return unix.Fchmod(f.fd, mode) }

// ReadRegular reads the regular file name of root (an operator's directory:
// a kernel policy or probe directory) of at most max bytes, never through
// a symlink: os.Root keeps name inside root, and Lstat refuses a link,
// FIFO or device at name itself.
func ReadRegular(root *os.Root, name string, max int64) ([]byte, error) {
	st, err := root.Lstat(name)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", name, st.Mode().Type())
	}
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, max)
	}
	return data, nil
}

// ReadFile reads a file someone else (a tenant) wrote, by path, for a root
// reader that was handed the path (gpuextctl probes read FILE): opened
// without following a symbolic link and without waiting on a FIFO, a
// regular file of at most max bytes (a link to /dev/zero or a sparse file
// of many GiB is refused before it is read). A file of another type wraps
// ErrNotRegular, a larger one ErrTooBig.
func ReadFile(path string, max int64) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: a %s, %w", path, fi.Mode().Type(), ErrNotRegular)
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("%s: %d bytes, more than %d: %w", path, fi.Size(), max, ErrTooBig)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: more than %d bytes: %w", path, max, ErrTooBig)
	}
	return b, nil
}
