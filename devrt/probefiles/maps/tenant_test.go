package maps

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A tenant's probes dir is hostile: ReadTenant never shows a host file
// through a link, never waits on a FIFO, never reads a huge file, and one
// bad entry does not hide the rest of the tenant.

// acctProbes is <acct>/probes of a tenant, with a host 0600 file next to it.
func acctProbes(t *testing.T) (dir, secret string) {
	t.Helper()
	acct := t.TempDir()
	dir = filepath.Join(acct, "probes")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	secret = filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(secret, []byte("image=- state=off reason=SECRET-HASH\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, secret
}

func readTenantTimeout(t *testing.T, dir string) *Tenant {
	t.Helper()
	type result struct {
		t   *Tenant
		err error
	}
	done := make(chan result, 1)
	go func() {
		ten, err := ReadTenant(dir, nil)
		done <- result{ten, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.t
	case <-time.After(10 * time.Second):
		t.Fatal("ReadTenant blocked")
		return nil
	}
}

func shows(t *Tenant, s string) bool {
	b, _ := json.Marshal(t)
	return strings.Contains(string(b), s)
}

func TestReadTenantRefusesSymlinks(t *testing.T) {
	dir, secret := acctProbes(t)
	writeFile(t, dir, "7.status", []byte("image=0 state=patched reason=ok\n"))
	if err := os.Symlink(secret, filepath.Join(dir, "8.status")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dir, "8-0.maps")); err != nil {
		t.Fatal(err)
	}
	ten := readTenantTimeout(t, dir)
	if shows(ten, "SECRET") {
		t.Fatalf("the linked host file's content is shown: %+v", ten)
	}
	if ten.Processes != 1 || ten.Patched != 1 {
		t.Errorf("the tenant's own status file: processes %d patched %d, want 1 and 1", ten.Processes, ten.Patched)
	}
	if len(ten.Skipped) != 2 || !strings.Contains(strings.Join(ten.Skipped, "\n"), "8.status: refused: a symbolic link") {
		t.Errorf("skipped %q, want both links named", ten.Skipped)
	}
	// The probes dir itself a link to a host dir.
	os.RemoveAll(dir)
	if err := os.Symlink(filepath.Dir(secret), dir); err != nil {
		t.Fatal(err)
	}
	os.Rename(secret, filepath.Join(filepath.Dir(secret), "9.status"))
	ten = readTenantTimeout(t, dir)
	if shows(ten, "SECRET") || ten.Processes != 0 || len(ten.Skipped) != 1 {
		t.Errorf("probes dir linked to a host dir: %+v", ten)
	}
}

func TestReadTenantFIFOAndHugeFiles(t *testing.T) {
	dir, _ := acctProbes(t)
	if err := syscall.Mkfifo(filepath.Join(dir, "3.status"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "3-0.maps"), 0o666); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "4.status", nil)
	if err := os.Truncate(filepath.Join(dir, "4.status"), MaxStatusSize+1); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "4-0.maps", nil)
	if err := os.Truncate(filepath.Join(dir, "4-0.maps"), MaxFileSize+1); err != nil {
		t.Fatal(err)
	}
	ten := readTenantTimeout(t, dir)
	got := strings.Join(ten.Skipped, "\n")
	for _, want := range []string{"3.status: refused: not a regular file", "3-0.maps: refused: not a regular file",
		"4.status: refused: too big", "4-0.maps: refused: too big"} {
		if !strings.Contains(got, want) {
			t.Errorf("skipped %q, want %q", ten.Skipped, want)
		}
	}
	if ten.Processes != 0 {
		t.Errorf("processes %d from refused files", ten.Processes)
	}
}
