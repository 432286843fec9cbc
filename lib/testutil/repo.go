package testutil

import (
	"path/filepath"
	"runtime"
)

// RepoRoot is the repository root (where go.mod is), found from this
// source file's place in it (lib/testutil), so it does not depend on the
// working directory a test runs in.
func RepoRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("testutil: cannot locate its source file")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}
