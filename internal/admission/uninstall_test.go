package admission

import (
	"os"
	"path/filepath"
	"strings"
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

// TestCleanNodeStaysInItsOwnDirs: a pin dir or state dir that is a link
// (to the bpffs root, to a host dir) is refused with an error naming it,
// and what the link points at keeps every file.
func TestCleanNodeStaysInItsOwnDirs(t *testing.T) {
	root := t.TempDir()
	host := filepath.Join(root, "bpffs-root") // stands for /sys/fs/bpf: other programs' pins
	if err := os.MkdirAll(filepath.Join(host, "cilium"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "cilium", "map"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	pin := filepath.Join(root, "gpuext-pins")
	if err := os.Symlink(host, pin); err != nil {
		t.Fatal(err)
	}
	linkedParent := filepath.Join(root, "via")
	if err := os.Symlink(host, linkedParent); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{pin, filepath.Join(linkedParent, "cilium")} {
		_, err := CleanNode(dir, "")
		if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("CleanNode(%s): %v; want a refusal naming it and the link", dir, err)
		}
		if _, err := CleanNode("", dir); err == nil {
			t.Errorf("CleanNode(state %s) emptied it", dir)
		}
	}
	if _, err := os.Stat(filepath.Join(host, "cilium", "map")); err != nil {
		t.Fatalf("the link's target lost its files: %v", err)
	}
}
