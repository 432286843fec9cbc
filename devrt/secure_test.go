package devrt

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/lib/testutil"
)

// secureApp prints whether it runs in secure-execution mode (AT_SECURE)
// and whether the interposer is in the process. It needs the interposer
// (DT_NEEDED, found through an absolute RUNPATH) because the dynamic
// loader ignores LD_PRELOAD of a library outside the trusted directories
// in a setuid or setgid program: this is how the library still gets into
// one, as it would from /etc/ld.so.preload or a trusted directory.
const secureApp = `#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <sys/auxv.h>
int main(void)
{
	printf("secure=%lu loaded=%d\n", getauxval(AT_SECURE),
	       dlopen("libgpuext-devrt.so", RTLD_NOW | RTLD_NOLOAD) != NULL);
	return 0;
}
`

// Row 14 of the security review: in a setuid or setgid process the env is
// the caller's, so GPUEXT_DEVRT_TRACE must not make the interposer create
// or append to a file there (as root, at a path the caller chose). The same
// app, run as nobody, writes its trace line when it is a plain program and
// writes nothing when it is setuid root or setgid root; the interposer is
// loaded in every case. Needs root (chown, setuid bits, running as nobody).
func TestSecureExecutionWritesNoTrace(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildDevrt(t)
	// Not t.TempDir: nobody must reach the app and the library (0755 all the way).
	dir, err := os.MkdirTemp("", "gpuext-devrt-secure-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	lib := filepath.Join(dir, "libgpuext-devrt.so")
	copyFile(t, filepath.Join(bin, "libgpuext-devrt.so"), lib, 0o755)
	src := filepath.Join(dir, "secure_app.c")
	if err := os.WriteFile(src, []byte(secureApp), 0o644); err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(dir, "secure_app")
	if out, err := exec.Command("gcc", "-O2", "-o", app, src, "-L"+dir, "-Wl,--no-as-needed", "-l:libgpuext-devrt.so",
		"-Wl,-rpath,"+dir, "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	// pub: nobody may create files there; root: only root (owner) and group root.
	pub, rootOnly := filepath.Join(dir, "pub"), filepath.Join(dir, "root")
	for d, mode := range map[string]os.FileMode{dir: 0o755, pub: 0o777, rootOnly: 0o775} {
		if err := os.MkdirAll(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(rootOnly, 0, 0); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name   string
		mode   os.FileMode // of the app, owned root:root
		dir    string      // where the trace would go
		secure bool
	}{
		{"plain", 0o755, pub, false},
		{"setuid-root", 0o755 | os.ModeSetuid, rootOnly, true},
		{"setgid-root", 0o755 | os.ModeSetgid, rootOnly, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			exe := filepath.Join(dir, "app-"+c.name)
			copyFile(t, app, exe, 0o755)
			if err := os.Chown(exe, 0, 0); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(exe, c.mode); err != nil { // after chown, which clears the bits
				t.Fatal(err)
			}
			trace := filepath.Join(c.dir, "trace-"+c.name)
			cmd := exec.Command(exe)
			cmd.Env = []string{"PATH=/usr/bin:/bin", tenantcfg.EnvDevrtTrace + "=" + trace, tenantcfg.EnvTenantID + "=7",
				tenantcfg.EnvDevrtDebug + "=1"}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
			}
			secure := 0
			if c.secure {
				secure = 1
			}
			if want := fmt.Sprintf("secure=%d loaded=1\n", secure); stdout.String() != want {
				// A nosuid mount would run the app without AT_SECURE: not this test's case.
				t.Fatalf("app says %q, want %q (is %s on a nosuid mount?)\nstderr:\n%s", stdout.String(), want, dir, stderr.String())
			}
			data, err := os.ReadFile(trace)
			switch {
			case !c.secure && err != nil:
				t.Fatalf("plain program: no trace line: %v\nstderr:\n%s", err, stderr.String())
			case !c.secure && !strings.Contains(string(data), fmt.Sprintf("pid=%d tenant=7", cmd.Process.Pid)):
				t.Fatalf("plain program: trace %q", data)
			case c.secure && err == nil:
				t.Fatalf("secure-execution process wrote the trace file %s: %q", trace, data)
			case c.secure && !os.IsNotExist(err):
				t.Fatalf("trace file: %v", err)
			case c.secure && !strings.Contains(stderr.String(), "secure-execution"):
				t.Fatalf("secure-execution process: no debug line saying the interposer is off\nstderr:\n%s", stderr.String())
			}
		})
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
