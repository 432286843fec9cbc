package cgroup_test

import (
	"os"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/cgroup/cgrouptest"
)

// TestExistsByID: a cgroup is found by its id alone while it exists, also
// under a path longer than any field that stores one, and not after rmdir.
func TestExistsByID(t *testing.T) {
	res, err := cgroup.NewResolver("")
	if err != nil {
		t.Fatal(err)
	}
	parent, _ := cgrouptest.New(t)
	dir := parent + "/" + strings.Repeat("d", 200) + "/" + strings.Repeat("e", 200)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir); os.Remove(dir[:strings.LastIndex(dir, "/")]) })
	rel := "/" + strings.TrimPrefix(strings.TrimPrefix(dir, res.V2Root()), "/")
	if len(rel) <= 255 {
		t.Fatalf("path %d bytes, want > 255", len(rel))
	}
	id, err := res.IDOf(rel)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := res.ExistsByID(id); err != nil || !ok {
		t.Fatalf("ExistsByID(%d) of a live cgroup = %v, %v", id, ok, err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if ok, err := res.ExistsByID(id); err != nil || ok {
		t.Fatalf("ExistsByID(%d) after rmdir = %v, %v; want false", id, ok, err)
	}
}
