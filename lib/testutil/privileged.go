package testutil

// The one rule for privileged tests: they skip when run locally without
// what they need, and fail when CI=true, so a CI run can never pass by
// skipping them.

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// SkipOrFail skips the test, or fails it when CI=true.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true, cannot skip: "+format, args...)
	}
	t.Skipf(format, args...)
}

// RequireRoot skips or fails (CI=true) unless the test runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		SkipOrFail(t, "needs root (euid %d)", os.Geteuid())
	}
}

// UnmountUnder unmounts, when the test ends, every mount below dir (the
// tmpfs accounting directories an admission mounts under a test's state
// dir), deepest first, so that removing dir afterwards succeeds. Register
// it after the t.TempDir it guards: cleanups run last-in first-out.
func UnmountUnder(t testing.TB, dir string) {
	t.Helper()
	t.Cleanup(func() {
		data, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return
		}
		var under []string
		prefix := filepath.Clean(dir) + "/"
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) > 4 && strings.HasPrefix(f[4], prefix) {
				under = append(under, f[4])
			}
		}
		sort.Sort(sort.Reverse(sort.StringSlice(under)))
		for _, m := range under {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
	})
}
