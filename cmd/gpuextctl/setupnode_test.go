package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/internal/agent"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/lib/testutil"
)

// A node where / is private (no systemd) and the container runtime gave the
// agent's init container the host's /sys/fs/bpf as an rshared bind mount.
const mountinfoFixture = `22 27 0:21 / /proc rw,relatime - proc proc rw
23 27 0:22 / /sys rw,relatime - sysfs sysfs rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
42 23 0:22 /fs/bpf /sys/fs/bpf rw,relatime shared:7 - sysfs sysfs rw
50 27 254:0 /data /mnt/with\040space rw,relatime shared:9 - ext4 /dev/vda rw
51 50 0:40 / /mnt/with\040space rw,relatime - tmpfs tmpfs rw
`

func TestMountOfFindsTheMountHoldingAPath(t *testing.T) {
	for _, tc := range []struct {
		path, mount string
		shared      bool
	}{
		{"/sys/fs/bpf", "/sys/fs/bpf", true},
		{"/sys/fs/bpf/gpuext", "/sys/fs/bpf", true},
		{"/sys/fs/bpfx", "/sys", false}, // a sibling that shares a prefix is not under the mount
		{"/sys/fs/cgroup/unified", "/sys/fs/cgroup", false},
		{"/var/lib/gpuext/pins", "/", false},
		{"/mnt/with space/pins", "/mnt/with space", false}, // the later mount over the shared one hides it
	} {
		mp, shared := mountOf([]byte(mountinfoFixture), tc.path)
		if mp != tc.mount || shared != tc.shared {
			t.Errorf("mountOf(%q) = %q shared %v, want %q shared %v", tc.path, mp, shared, tc.mount, tc.shared)
		}
	}
}

func writeLib(t *testing.T, dir, content string) string {
	t.Helper()
	p := filepath.Join(dir, "libgpuext-devrt.so")
	if err := os.WriteFile(p, []byte("\x7fELF"+content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// The device runtime is mapped by every tenant process: an update must
// never change the file they mapped (truncation would SIGBUS them).
func TestInstallDevrtReplacesByRenameAndKeepsTheOldFileForItsUsers(t *testing.T) {
	srcDir, host := t.TempDir(), filepath.Join(t.TempDir(), "opt", "gpuext", "devrt")
	dst := filepath.Join(host, "libgpuext-devrt.so")
	var out bytes.Buffer
	if err := installDevrt(writeLib(t, srcDir, "v1"), host, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "devrt: installed "+dst) {
		t.Errorf("first install said %q", out.String())
	}
	fi, err := os.Stat(dst)
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("installed library: %v, mode %v, want 0755", err, fi.Mode())
	}
	first := inode(t, dst)

	out.Reset()
	if err := installDevrt(writeLib(t, srcDir, "v1"), host, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "is up to date") || inode(t, dst) != first {
		t.Errorf("same library again: %q, inode %d -> %d; want up to date and untouched", out.String(), first, inode(t, dst))
	}

	user, err := os.Open(dst) // a tenant process that loaded v1
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()
	out.Reset()
	if err := installDevrt(writeLib(t, srcDir, "v2"), host, &out); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dst); string(got) != "\x7fELFv2" {
		t.Errorf("after the update %s holds %q, want v2", dst, got)
	}
	old := make([]byte, 16)
	n, _ := user.ReadAt(old, 0)
	if string(old[:n]) != "\x7fELFv1" {
		t.Errorf("the running process's library changed under it: %q, want v1", old[:n])
	}
	if inode(t, dst) == first {
		t.Error("the update reused the old inode: it was written in place")
	}
	if left, _ := filepath.Glob(filepath.Join(host, ".*")); len(left) != 0 {
		t.Errorf("temporary files left in %s: %v", host, left)
	}
}

func TestInstallDevrtRefusesWhatIsNotALibrary(t *testing.T) {
	src := filepath.Join(t.TempDir(), "lib.so")
	os.WriteFile(src, []byte("#!/bin/sh\n"), 0o755) //nolint:errcheck
	host := t.TempDir()
	err := installDevrt(src, host, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), src+" is not an ELF shared library") {
		t.Fatalf("err = %v, want it to name %s as not a library", err, src)
	}
	if _, err := os.Stat(filepath.Join(host, "libgpuext-devrt.so")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("something was installed: %v", err)
	}
	if err := installDevrt(filepath.Join(host, "missing.so"), host, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "missing.so") {
		t.Errorf("missing source: err = %v, want it named", err)
	}
}

func TestPingAnswersOnlyWhileTheAgentServes(t *testing.T) {
	dir, err := os.MkdirTemp("", "gpuextctl-ping-") // unix socket paths must stay short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "agent", "agent.sock")
	cfg := config.Default()
	cfg.AgentSocket = sock

	if err := ping(cfg, nil, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), sock) {
		t.Fatalf("no agent: err = %v, want an error naming %s", err, sock)
	}
	srv, err := agent.Listen(sock, func() (agent.Core, error) { return nil, errors.New("not configured") },
		logrus.NewEntry(logrus.New()))
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve() //nolint:errcheck
	var out bytes.Buffer
	if err := ping(cfg, nil, &out); err != nil {
		t.Fatalf("ping of a serving agent: %v", err)
	}
	if !strings.Contains(out.String(), "agent at "+sock+" answers") {
		t.Errorf("ping said %q", out.String())
	}
	srv.Close()

	// an agent that accepts and never answers (hung) fails the probe
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	err = ping(cfg, []string{"--timeout", "200ms"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "no answer in 200ms") {
		t.Errorf("hung agent: err = %v, want no answer in 200ms", err)
	}
}

// setup-node in a mount namespace whose mounts are private, as a container
// without mountPropagation: Bidirectional: it must refuse to mount a bpffs
// the host would never see; with shared mounts it mounts one.
func TestSetupNodeInContainerMountsBPFFSOnlyWhereTheHostSeesIt(t *testing.T) {
	testutil.RequireRoot(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		testutil.SkipOrFail(t, "unshare (util-linux) missing")
	}
	dir, err := os.MkdirTemp("", "gpuextctl-setup-")
	if err != nil {
		t.Fatal(err)
	}
	pins := filepath.Join(dir, "pins")
	t.Cleanup(func() {
		unix.Unmount(pins, unix.MNT_DETACH) //nolint:errcheck // only if a shared host mount carried it out
		os.RemoveAll(dir)
	})
	bin := filepath.Join(dir, "gpuextctl")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	src := writeLib(t, dir, "lib")
	run := func(propagation string) (string, error) {
		cmd := exec.Command(unshare, "--mount", "--propagation", propagation, bin, "setup-node", "--in-container",
			"--pin-dir", pins, "--devrt-src", src, "--devrt-dir", filepath.Join(dir, "devrt-"+propagation))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("private")
	if err == nil || !strings.Contains(out, "not shared with the host") || !strings.Contains(out, "bpffs.mountPropagation") {
		t.Fatalf("private mounts: err %v, output %q; want a refusal naming the chart value", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "devrt-private", "libgpuext-devrt.so")); err == nil {
		t.Error("the device runtime was installed although setup-node failed before it")
	}
	out, err = run("shared")
	if err != nil || !strings.Contains(out, "mounted one at "+pins) || !strings.Contains(out, "devrt: installed") {
		t.Fatalf("shared mounts: err %v, output %q; want bpffs mounted at %s and the library installed", err, out, pins)
	}
}
