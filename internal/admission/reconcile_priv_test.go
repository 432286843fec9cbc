package admission_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/internal/admission"
)

// TestReconcileDropsGoneCgroups: an OCI-registered container whose cgroup
// disappeared without a poststop, and a tenant the wrapper reserved for a
// container that never started, are dropped; a live one and an NRI one stay.
func TestReconcileDropsGoneCgroups(t *testing.T) {
	l := newCoreLab(t, admission.FailOpen)
	core, reg, parent := l.core, l.reg, l.parent
	mk := func(name string) string {
		if err := os.Mkdir(filepath.Join(parent, name), 0o755); err != nil {
			t.Fatal(err)
		}
		return l.rel + "/" + name
	}
	register := func(id, path string, rt bpf.Runtime) {
		info := admission.ContainerInfo{ID: id, Name: id, CgroupsPath: path, Runtime: rt}
		d, err := core.Admit(info)
		if err == nil {
			d, _, err = core.Register(info, d)
		}
		if err != nil || d.Skipped {
			t.Fatalf("register %s: %v %v", id, err, d.Err)
		}
	}
	register("live", mk("live"), bpf.RuntimeOCIHook)
	register("gone", mk("gone"), bpf.RuntimeOCIHook)
	register("nri-gone", mk("nri-gone"), bpf.RuntimeNRI)
	if _, err := core.Admit(admission.ContainerInfo{ID: "never-started", Runtime: bpf.RuntimeRuncWrapper}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"gone", "nri-gone"} {
		if err := os.Remove(filepath.Join(parent, d)); err != nil {
			t.Fatal(err)
		}
	}

	n, err := core.Reconcile(time.Hour, bpf.RuntimeOCIHook, bpf.RuntimeRuncWrapper)
	if err != nil || n != 1 {
		t.Fatalf("Reconcile(grace 1h) = %d, %v; want 1 dropped (the gone cgroup; the reservation is young)", n, err)
	}
	n, err = core.Reconcile(0, bpf.RuntimeOCIHook, bpf.RuntimeRuncWrapper)
	if err != nil || n != 1 {
		t.Fatalf("Reconcile(grace 0) = %d, %v; want 1 dropped (the old reservation)", n, err)
	}
	list, err := reg.List()
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, tn := range list {
		for _, cg := range tn.Cgroups {
			left = append(left, cg.ContainerID)
		}
		if len(tn.Cgroups) == 0 {
			left = append(left, tn.Key)
		}
	}
	if strings.Join(left, ",") != "live,nri-gone" && strings.Join(left, ",") != "nri-gone,live" {
		t.Fatalf("left in the registry: %v; want live (OCI, cgroup exists) and nri-gone (not this runtime)", left)
	}
}
