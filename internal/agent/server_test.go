package agent

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

func noCore() (Core, error) { return nil, errors.New("not configured") }

// sockDir is a directory under /tmp (t.TempDir paths can exceed the unix
// socket limit).
func sockDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "gx-agent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func listen(t *testing.T, path string) (*Server, error) {
	t.Helper()
	s, err := Listen(path, noCore, logrus.NewEntry(logrus.New()))
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

// TestListenNeverTakesWhatIsNotItsOwn: what sits at the socket path and is
// not a dead agent's socket is an error naming the path and stays; a shared
// directory holding the socket is an error naming it and keeps its mode.
func TestListenNeverTakesWhatIsNotItsOwn(t *testing.T) {
	root := sockDir(t)

	// a regular file at the socket path
	file := filepath.Join(root, "file", "agent.sock")
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("someone's data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := listen(t, file); err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("Listen over a regular file: %v; want an error naming %s", err, file)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "someone's data" {
		t.Fatalf("the file at the socket path: %q %v; want it untouched", b, err)
	}

	// a directory at the socket path
	dirAt := filepath.Join(root, "dir", "agent.sock")
	if err := os.MkdirAll(filepath.Join(dirAt, "keep"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := listen(t, dirAt); err == nil || !strings.Contains(err.Error(), dirAt) {
		t.Fatalf("Listen over a directory: %v; want an error naming %s", err, dirAt)
	}
	if _, err := os.Stat(filepath.Join(dirAt, "keep")); err != nil {
		t.Fatalf("the directory at the socket path lost its contents: %v", err)
	}

	// a shared directory (as /tmp is): refused, mode kept
	shared := filepath.Join(root, "shared")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shared, "other-app.pid"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(shared, "agent.sock")
	if _, err := listen(t, sock); err == nil || !strings.Contains(err.Error(), shared) {
		t.Fatalf("Listen in a shared dir: %v; want an error naming %s", err, shared)
	}
	if fi, err := os.Stat(shared); err != nil || fi.Mode()&os.ModePerm != 0o777 || fi.Mode()&os.ModeSticky == 0 {
		t.Fatalf("shared dir after Listen: %v %v; want its mode 1777 kept", fi.Mode(), err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a socket was made in the shared dir (%v)", err)
	}

	// a link where the directory should be
	link := filepath.Join(root, "link")
	if err := os.Symlink(shared, link); err != nil {
		t.Fatal(err)
	}
	if _, err := listen(t, filepath.Join(link, "agent.sock")); err == nil || !strings.Contains(err.Error(), link) {
		t.Fatalf("Listen in a linked dir: %v; want an error naming %s", err, link)
	}
}

// TestListenOwnDir: a missing dir is made 0700, an empty one (the kubelet's
// DirectoryOrCreate, 0755) becomes 0700, and an earlier agent's socket is
// replaced (a dead one, or a rolling update's old pod still serving).
func TestListenOwnDir(t *testing.T) {
	root := sockDir(t)
	made := filepath.Join(root, "made", "agent.sock")
	s, err := listen(t, made)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Dir(made)); err != nil || fi.Mode()&os.ModePerm != 0o700 {
		t.Fatalf("made dir: %v %v, want 0700", fi.Mode(), err)
	}
	s.Close()

	empty := filepath.Join(root, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(empty, "agent.sock")
	// a killed agent's socket: nobody serves it
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if _, err := listen(t, sock); err != nil {
		t.Fatalf("Listen over a dead agent's socket in an empty dir: %v", err)
	}
	if fi, err := os.Stat(empty); err != nil || fi.Mode()&os.ModePerm != 0o700 {
		t.Fatalf("empty dir: %v %v, want 0700", fi.Mode(), err)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("the new socket does not answer: %v", err)
	}
	c.Close()
	// the old agent of a rolling update still serves: the new one takes the path
	if _, err := listen(t, sock); err != nil {
		t.Fatalf("Listen over an earlier agent's served socket: %v", err)
	}
}
