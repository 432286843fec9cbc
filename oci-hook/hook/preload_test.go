package hook

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/lib/testutil"
)

func TestPreloadBlocker(t *testing.T) {
	root := t.TempDir()
	mk := func(p string) string {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		return full
	}
	copyBin := func(src, dst string, mode os.FileMode) {
		data, err := os.ReadFile(src)
		if err != nil {
			testutil.SkipOrFail(t, "%s: %v", src, err)
		}
		if err := os.WriteFile(mk(dst), data, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(mk(dst), mode); err != nil {
			t.Fatal(err)
		}
	}
	copyBin("/bin/ls", "/usr/bin/ls", 0o755)                   // dynamic
	copyBin("/bin/busybox", "/bin/busybox", 0o755)             // static (busybox-static)
	copyBin("/bin/ls", "/usr/bin/suidls", 0o755|os.ModeSetuid) // setuid
	if err := os.WriteFile(mk("/app/run.sh"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/bin/busybox", mk("/bin/sh")); err != nil { // absolute link: stays in root
		t.Fatal(err)
	}
	if err := os.Symlink("../../../../../bin/busybox", mk("/usr/local/bin/escape")); err != nil { // ".." stops at root
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		env  []string
		want string // substring; "" = no blocker
	}{
		{[]string{"ls", "-l"}, nil, ""},
		{[]string{"/usr/bin/ls"}, nil, ""},
		{[]string{"busybox", "sleep", "1"}, nil, "statically linked"},
		{[]string{"sh", "-c", "x"}, nil, "statically linked"},
		{[]string{"escape"}, []string{"PATH=/usr/local/bin"}, "statically linked"},
		{[]string{"suidls"}, nil, "setuid"},
		{[]string{"/app/run.sh"}, nil, ""},
		{[]string{"missing"}, nil, ""},
		{[]string{"ls"}, []string{"PATH=/nowhere"}, ""},
		{nil, nil, ""},
	} {
		got := PreloadBlocker(root, tc.args, tc.env)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("PreloadBlocker(%v, %v) = %q, want %q", tc.args, tc.env, got, tc.want)
		}
	}
}
