package admission

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCleanNodeRemovesStateNotLinkTargets: the uninstall empties the pin
// and state dirs; a tenant's symlink in its acct dir is removed, and what it
// points at on the host stays.
func TestCleanNodeRemovesStateNotLinkTargets(t *testing.T) {
	root := t.TempDir()
	pin, state, outside := filepath.Join(root, "pins"), filepath.Join(root, "state"), filepath.Join(root, "host-file")
	for _, d := range []string{filepath.Join(pin, "links"), TenantDir(state, 7), AcctDir(state, 7)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(pin, "gpuext_tenants"), filepath.Join(TenantDir(state, 7), "settings.bin"), outside} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(root, filepath.Join(AcctDir(state, 7), "evil")); err != nil {
		t.Fatal(err)
	}
	removed, err := CleanNode(pin, state)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 2 {
		t.Errorf("emptied %v, want both dirs", removed)
	}
	for _, d := range []string{pin, state} {
		if _, err := os.Lstat(d); !os.IsNotExist(err) {
			t.Errorf("%s still there after the uninstall (%v)", d, err)
		}
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("a file the tenant's symlink pointed at was removed: %v", err)
	}
}

func TestCleanNodeRefusesRoots(t *testing.T) {
	for _, d := range []string{"/", "/sys/fs/bpf", "relative/dir", "/sys/fs/bpf/"} {
		if _, err := CleanNode(d, ""); err == nil {
			t.Errorf("CleanNode(%q) emptied it", d)
		}
	}
}
