//go:build kernellab

package guest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/internal/admission"
)

// Layer 1 of the GPU memory quota (issue 30): the kernel's cgroup dmem
// controller. TestDmemKernel* need a kernel with the controller (the 7.x lab,
// KERNEL_LAB_SERIES=7.x, runs only them); TestDmemWithoutController is the
// 6.12 lab's (no controller there).

const (
	vidmemFile   = gpusimDir + "/vidmem"
	gpusimBusID  = "0000:ee:00.0" // gpusim's made-up PCI bus id (kmod/gpusim/vidmem.c)
	gpusimRegion = "nvidia/" + gpusimBusID + "/vidmem"
)

// vidmemAlloc runs a shell in cgroup dir (a v2 directory) that opens gpusim's
// vidmem file (one simulated GPU process) and allocates each size in turn,
// printing "ok" or "refused: ERR" for each, then the cgroup's dmem.current
// while it still holds what it got; closing the file at exit frees it.
func vidmemAlloc(t *testing.T, dir string, sizes ...uint64) (results []string, current string) {
	t.Helper()
	var s strings.Builder
	fmt.Fprintf(&s, "echo $$ > %s/cgroup.procs || exit 9\nexec 3<>%s || exit 9\n", dir, vidmemFile)
	for _, n := range sizes {
		fmt.Fprintf(&s, "if echo 'alloc %d' >&3 2>/tmp/vidmem.err; then echo ok; else echo \"refused: $(cat /tmp/vidmem.err)\"; fi\n", n)
	}
	fmt.Fprintf(&s, "echo CURRENT; cat %s/dmem.current 2>/dev/null || true\n", dir) // none without the controller
	out, err := exec.Command("/bin/sh", "-c", s.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("allocating in %s: %v: %s", dir, err, out)
	}
	res, cur, _ := strings.Cut(string(out), "CURRENT\n")
	return strings.Split(strings.TrimSpace(res), "\n"), cur
}

func mkdirCgroup(t *testing.T, dir string) {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("mkdir cgroup: %v", err)
	}
	t.Cleanup(func() { os.Remove(dir) })
}

func resolver(t *testing.T) *cgroup.Resolver {
	t.Helper()
	r, err := cgroup.NewResolver("")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDmemKernelHoldsQuota: gpusim registers its region; the agent's own
// function (admission.ApplyDmem) enables dmem along tenant a's path and
// writes its 8 MiB quota into dmem.max. A process of tenant a allocating
// 6 MiB then 4 MiB is refused the second with the out-of-memory error;
// tenant b, beside it with no quota, gets both; dmem.current shows what each
// holds. Lifting the quota (0: "max") lets a allocate as much.
func TestDmemKernelHoldsQuota(t *testing.T) {
	requireLab(t)
	res := resolver(t)
	dm, err := res.Dmem()
	if err != nil || !dm.Controller {
		t.Fatalf("this kernel has no dmem controller (Dmem %+v, %v): the dmem tests need the 7.x lab", dm, err)
	}
	if r, ok := dm.Region(gpusimRegion); !ok || r.Bytes != 1<<30 {
		t.Fatalf("dmem.capacity has no %s of 1 GiB: %+v", gpusimRegion, dm.Regions)
	}
	if got, _ := os.ReadFile(vidmemFile); !strings.Contains(string(got), "region "+gpusimRegion+"\n") {
		t.Fatalf("gpusim vidmem: %q", got)
	}

	parent := "/sys/fs/cgroup/dmemlab"
	mkdirCgroup(t, parent)
	a, b := parent+"/a", parent+"/b"
	mkdirCgroup(t, a)
	mkdirCgroup(t, b)
	const mib = 1 << 20
	quota := []admission.DmemQuota{{GPU: 0, PCIBusID: "00000000:EE:00.0" /* NVML's form */, Bytes: 8 * mib}}
	applied, err := admission.ApplyDmem(res, dm, "/dmemlab/a", quota)
	if err != nil {
		t.Fatalf("ApplyDmem: %v", err)
	}
	if len(applied.Held) != 1 || applied.Held[0].Region != gpusimRegion || len(applied.NoRegion) != 0 {
		t.Fatalf("ApplyDmem = %+v", applied)
	}
	if !strings.Contains(strings.Join(applied.Enabled, ","), "/dmemlab") {
		t.Fatalf("ApplyDmem enabled %v: want /dmemlab (its parent) among them", applied.Enabled)
	}
	max, err := res.DmemMax("/dmemlab/a")
	if err != nil || max[gpusimRegion] != (cgroup.DmemValue{Bytes: 8 * mib}) {
		t.Fatalf("dmem.max of a = %v, %v", max, err)
	}
	if max, err := res.DmemMax("/dmemlab/b"); err != nil || !max[gpusimRegion].Unlimited {
		t.Fatalf("dmem.max of b = %v, %v (want max: no quota)", max, err)
	}
	if layer := admission.EnforcingLayer(max, 8*mib); layer != admission.LayerDmem {
		t.Fatalf("EnforcingLayer = %q", layer)
	}

	got, cur := vidmemAlloc(t, a, 6*mib, 4*mib)
	if got[0] != "ok" || !strings.HasPrefix(got[1], "refused") || !strings.Contains(got[1], "Cannot allocate memory") {
		t.Fatalf("tenant a (8 MiB quota), 6 MiB then 4 MiB: %q; want ok, then refused with out-of-memory", got)
	}
	if v, err := cgroup.ParseDmemValues([]byte(cur)); err != nil || v[gpusimRegion].Bytes != 6*mib {
		t.Fatalf("tenant a's dmem.current while it held 6 MiB: %q (%v)", cur, err)
	}
	got, cur = vidmemAlloc(t, b, 6*mib, 4*mib)
	if strings.Join(got, ",") != "ok,ok" {
		t.Fatalf("tenant b (no quota), 6 MiB then 4 MiB: %q; want both", got)
	}
	if v, err := cgroup.ParseDmemValues([]byte(cur)); err != nil || v[gpusimRegion].Bytes != 10*mib {
		t.Fatalf("tenant b's dmem.current while it held 10 MiB: %q (%v)", cur, err)
	}
	// The processes are gone: their memory is uncharged.
	for _, cg := range []string{"/dmemlab/a", "/dmemlab/b"} {
		if v, err := res.DmemCurrent(cg); err != nil || v[gpusimRegion].Bytes != 0 {
			t.Fatalf("dmem.current of %s after its process exited: %v, %v", cg, v, err)
		}
	}

	// A policy change without a quota lifts it.
	quota[0].Bytes = 0
	if _, err := admission.ApplyDmem(res, dm, "/dmemlab/a", quota); err != nil {
		t.Fatal(err)
	}
	if got, _ := vidmemAlloc(t, a, 6*mib, 4*mib); strings.Join(got, ",") != "ok,ok" {
		t.Fatalf("tenant a without a quota: %q; want both", got)
	}

	// A GPU whose driver registered no region is left to the next layer.
	applied, err = admission.ApplyDmem(res, dm, "/dmemlab/b", []admission.DmemQuota{{GPU: 1, PCIBusID: "0000:17:00.0", Bytes: mib}})
	if err != nil || len(applied.Held) != 0 || len(applied.NoRegion) != 1 || applied.NoRegion[0].Region != "nvidia/0000:17:00.0/vidmem" {
		t.Fatalf("ApplyDmem for a GPU without a region = %+v, %v", applied, err)
	}
}

// TestDmemWithoutController: on a kernel without the controller (the 6.12
// lab, and every lent GPU machine) the agent's function says so and writes
// nothing; gpusim registers no region and its allocations are not charged.
func TestDmemWithoutController(t *testing.T) {
	requireLab(t)
	res := resolver(t)
	dm, err := res.Dmem()
	if err != nil || dm.Controller {
		t.Fatalf("Dmem() = %+v, %v: want no controller on this kernel", dm, err)
	}
	dir := "/sys/fs/cgroup/nodmem"
	mkdirCgroup(t, dir)
	_, err = admission.ApplyDmem(res, dm, "/nodmem", []admission.DmemQuota{{GPU: 0, PCIBusID: gpusimBusID, Bytes: 1 << 20}})
	if !errors.Is(err, cgroup.ErrNoDmem) {
		t.Fatalf("ApplyDmem without the controller: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "dmem.max")); err == nil {
		t.Fatal("a dmem.max exists without the controller")
	}
	if got, _ := os.ReadFile(vidmemFile); !strings.Contains(string(got), "region none\n") {
		t.Fatalf("gpusim vidmem without the controller: %q", got)
	}
	if got, _ := vidmemAlloc(t, dir, 6<<20, 4<<20); strings.Join(got, ",") != "ok,ok" {
		t.Fatalf("allocations without the controller: %q", got)
	}
}
