// Package privtest is the one rule for privileged tests: they skip when run
// locally without what they need, and fail when CI=true, so a CI run can
// never pass by skipping them.
package privtest

import (
	"os"
	"testing"
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
