package tenantfs

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuext/gpuext/lib/testutil"
)

// tenantDir is a host root with one tenant-writable dir "t" under it.
func tenantDir(t *testing.T) (root, dir string) {
	t.Helper()
	root = t.TempDir()
	dir = filepath.Join(root, "t")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return root, dir
}

func openT(t *testing.T, root string) *Dir {
	t.Helper()
	d, err := OpenDir(root, "t")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// secret is a 0600 file of the host the tenant would like to see.
func secret(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(p, []byte("root:SECRET-HASH:19000::::::\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadFile(t *testing.T) {
	root, dir := tenantDir(t)
	if err := os.WriteFile(filepath.Join(dir, "a"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := openT(t, root)
	b, err := d.ReadFile("a", 5)
	if err != nil || string(b) != "hello" {
		t.Fatalf("ReadFile: %q %v", b, err)
	}
	if _, err := d.ReadFile("a", 4); !errors.Is(err, ErrTooBig) || !errors.Is(err, ErrRefused) {
		t.Errorf("5 bytes with a limit of 4: %v, want ErrTooBig", err)
	}
	if _, err := d.ReadFile("missing", 5); !errors.Is(err, os.ErrNotExist) || errors.Is(err, ErrRefused) {
		t.Errorf("missing file: %v, want not-exist (not a refusal)", err)
	}
	for _, bad := range []string{"", ".", "..", "../t/a", "x/a", "/etc/passwd"} {
		if _, err := d.ReadFile(bad, 5); !errors.Is(err, ErrBadName) {
			t.Errorf("ReadFile(%q): %v, want ErrBadName", bad, err)
		}
	}
}

// A link to a host file is refused and its bytes are never returned: as
// the file itself, as a directory component, and as the directory.
func TestSymlinkRefused(t *testing.T) {
	root, dir := tenantDir(t)
	sec := secret(t)
	if err := os.Symlink(sec, filepath.Join(dir, "usage")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(sec), filepath.Join(dir, "probes")); err != nil {
		t.Fatal(err)
	}
	d := openT(t, root)
	b, err := d.ReadFile("usage", 1<<20)
	if !errors.Is(err, ErrSymlink) || b != nil {
		t.Errorf("link to a 0600 file: %q, %v; want ErrSymlink", b, err)
	}
	if err != nil && strings.Contains(err.Error(), "SECRET") {
		t.Errorf("error shows the file's content: %v", err)
	}
	if _, err := d.Open("usage", -1); !errors.Is(err, ErrSymlink) {
		t.Errorf("Open of a link: %v", err)
	}
	if _, err := d.OpenDir("probes"); !errors.Is(err, ErrSymlink) {
		t.Errorf("OpenDir of a link to a dir: %v, want ErrSymlink", err)
	}
	if _, err := OpenDir(root, "t/probes"); !errors.Is(err, ErrSymlink) {
		t.Errorf("OpenDir(root, t/probes): %v, want ErrSymlink", err)
	}
	// The tenant replaces its whole dir by a link.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(sec), dir); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDir(root, "t"); !errors.Is(err, ErrSymlink) {
		t.Errorf("tenant dir replaced by a link: %v, want ErrSymlink", err)
	}
}

// A FIFO is refused at once: nobody waits for a writer.
func TestFIFODoesNotBlock(t *testing.T) {
	root, dir := tenantDir(t)
	if err := syscall.Mkfifo(filepath.Join(dir, "usage"), 0o666); err != nil {
		t.Fatal(err)
	}
	d := openT(t, root)
	done := make(chan error, 1)
	go func() {
		_, err := d.ReadFile("usage", 1<<20)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegular) {
			t.Errorf("FIFO: %v, want ErrNotRegular", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reading a FIFO blocked")
	}
	// OpenFIFO takes it, without blocking either, and reads what is written.
	f, err := d.OpenFIFO("usage")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := os.OpenFile(filepath.Join(dir, "usage"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("w"))
	w.Close() // the last outside writer goes: no end-of-file for the reader
	buf := make([]byte, 8)
	if n, err := f.Read(buf); n != 1 || err != nil {
		t.Errorf("FIFO read: %d %v", n, err)
	}
	if n, err := f.Read(buf); n != 0 || err != nil {
		t.Errorf("empty FIFO without writers: %d %v, want 0 and no error (no end-of-file, no wait)", n, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "plain"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := d.OpenFIFO("plain"); !errors.Is(err, ErrNotFIFO) {
		t.Errorf("OpenFIFO of a regular file: %v", err)
	}
}

// A huge (sparse) file is refused before it is read.
func TestHugeFileRefused(t *testing.T) {
	root, dir := tenantDir(t)
	if err := os.WriteFile(filepath.Join(dir, "big"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, "big"), 64<<30); err != nil {
		t.Fatal(err)
	}
	d := openT(t, root)
	start := time.Now()
	if _, err := d.ReadFile("big", 1<<20); !errors.Is(err, ErrTooBig) {
		t.Errorf("64 GiB file: %v, want ErrTooBig", err)
	}
	if time.Since(start) > time.Second {
		t.Errorf("refusing took %v: it was read", time.Since(start))
	}
	// Open with no limit: a fixed part of it can still be read with ReadAt.
	f, err := d.Open("big", -1)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 16)
	if n, err := f.ReadAt(buf, 0); n != 16 || err != nil || !bytes.Equal(buf, make([]byte, 16)) {
		t.Errorf("ReadAt: %d %v", n, err)
	}
}

// A file truncated under an open File gives short reads, never a fault.
func TestTruncatedUnderReader(t *testing.T) {
	root, dir := tenantDir(t)
	p := filepath.Join(dir, "usage")
	if err := os.WriteFile(p, bytes.Repeat([]byte{1}, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	d := openT(t, root)
	f, err := d.Open("usage", 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Truncate(p, 10); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	if n, err := f.ReadAt(buf, 0); n != 10 || !errors.Is(err, io.EOF) {
		t.Errorf("after truncation: %d %v, want 10 and EOF", n, err)
	}
	if !d.Same("usage", f) {
		t.Error("Same: false for the file still there")
	}
	os.Remove(p)
	os.WriteFile(p, nil, 0o644)
	if d.Same("usage", f) {
		t.Error("Same: true after the tenant replaced the file")
	}
}

func TestNames(t *testing.T) {
	root, dir := tenantDir(t)
	for _, n := range []string{"a", "b", "c"} {
		os.WriteFile(filepath.Join(dir, n), nil, 0o644)
	}
	d := openT(t, root)
	for i := 0; i < 2; i++ { // twice: the listing does not move d's offset
		names, err := d.Names(3)
		if err != nil || len(names) != 3 {
			t.Fatalf("Names: %v %v", names, err)
		}
	}
	if _, err := d.Names(2); !errors.Is(err, ErrTooBig) {
		t.Errorf("3 entries with a limit of 2: %v", err)
	}
}

// A device node is not opened (its driver's open never runs): O_PATH first.
func TestDeviceNodeNotOpened(t *testing.T) {
	testutil.RequireRoot(t)
	root, dir := tenantDir(t)
	if err := syscall.Mknod(filepath.Join(dir, "usage"), syscall.S_IFCHR|0o666, int(1<<8|5)); err != nil { // /dev/zero
		testutil.SkipOrFail(t, "mknod: %v", err)
	}
	d := openT(t, root)
	if _, err := d.ReadFile("usage", 1<<20); !errors.Is(err, ErrNotRegular) {
		t.Errorf("char device: %v, want ErrNotRegular", err)
	}
}

// TestWriteFile: a write reaches the file itself, never a link's target,
// and creates nothing.
func TestWriteFile(t *testing.T) {
	root, dir := tenantDir(t)
	if err := os.WriteFile(filepath.Join(dir, "dmem.max"), []byte("x max\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(root, "target")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	d := openT(t, root)
	if err := d.WriteFile("dmem.max", []byte("x 42")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "dmem.max")); !strings.HasPrefix(string(b), "x 42") {
		t.Fatalf("dmem.max = %q", b)
	}
	if err := d.WriteFile("link", []byte("x")); !errors.Is(err, ErrSymlink) {
		t.Fatalf("write through a link: %v", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatalf("the link's target was written: %q", b)
	}
	if err := d.WriteFile("new", []byte("x")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("write of a missing file: %v", err)
	}
}
