package devrt

// The quota applies per GPU (docs/device-plugin.md): a container given GPU
// memory on some GPUs by the scheduler has a quota on each device ordinal it
// sees (after CUDA_VISIBLE_DEVICES), accounted across its processes, and no
// memory on a GPU it was not given. The fake driver exposes two GPUs
// (FAKECUDA_DEVICES=2) and honours CUDA_VISIBLE_DEVICES as the real one does.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/devrt/tenantcfg"
)

// gpuTenant is a tenant given quotas on host GPUs, as admission writes it
// for a container the device plugin bound to those GPUs.
func gpuTenant(t *testing.T, id int, gpus []int, quotas []uint64, visible string) *tenant {
	t.Helper()
	var most uint64
	for _, q := range quotas {
		most = max(most, q)
	}
	tn := newTenant(t, id, most, "standard", func(f *tenantcfg.File) {
		f.GPUs, f.GPUQuotaBytes = gpus, quotas
	})
	tn.extra = []string{"FAKECUDA_DEVICES=2", fmt.Sprintf("FAKECUDA_TOTAL_BYTES=%d", 8*gib)}
	if visible != "" {
		tn.extra = append(tn.extra, "CUDA_VISIBLE_DEVICES="+visible)
	}
	return tn
}

// A container given 2 units (2 GiB) on gpu1: its device 0 is gpu1, where it
// allocates 2 GiB and is refused beyond; cuMemGetInfo shows the 2 GiB.
func TestQuotaOnTheGPUItWasGiven(t *testing.T) {
	tn := gpuTenant(t, 11, []int{1}, []uint64{2 * gib}, "1")
	lines, _ := tn.run("app_linked", "info", "alloc", "2GiB", "alloc", "1MiB", "info")
	wantLines(t, lines, fmt.Sprintf("info free=%d total=%d", 2*gib, 2*gib), "alloc 2147483648 ok",
		"alloc 1048576 CUDA_ERROR_OUT_OF_MEMORY", fmt.Sprintf("info free=0 total=%d", 2*gib))
	calls := tn.driverCalls(0)
	if countPrefix(calls, "alloc gpu=1 size=2147483648 rc=0") != 1 || countPrefix(calls, "alloc gpu=0 ") != 0 {
		t.Fatalf("the 2 GiB did not go to gpu1 (and only there): %q", calls)
	}
	if countPrefix(calls, "size=1048576") != 0 {
		t.Fatalf("the refused allocation reached the driver: %q", calls)
	}
	// a second process of the tenant, while a first one holds 1.5 GiB on
	// gpu1: the GPU's quota is the tenant's, not the process's
	h := tn.hold("app_linked", "alloc", "1536MiB")
	wantLines(t, h.lines, "alloc 1610612736 ok")
	lines, _ = tn.run("app_procaddr", "alloc", "512MiB", "alloc", "1MiB")
	wantLines(t, lines, "alloc 536870912 ok", "alloc 1048576 CUDA_ERROR_OUT_OF_MEMORY")
}

// A container given host GPU 1 through CDI has that GPU's device nodes
// only: CUDA numbers it 0 (FAKECUDA_DEVICES=1, no CUDA_VISIBLE_DEVICES, as
// the device plugin sets none without UUIDs). The tenant's quotas are per
// device ordinal in the order of its host GPUs, so host GPU 1's quota is
// ordinal 0's, the GPU the container sees.
func TestQuotaOnTheOnlyGPUOfACDIContainer(t *testing.T) {
	tn := gpuTenant(t, 15, []int{1}, []uint64{2 * gib}, "")
	tn.extra = []string{"FAKECUDA_DEVICES=1", fmt.Sprintf("FAKECUDA_TOTAL_BYTES=%d", 8*gib), "CUDA_DEVICE_ORDER=PCI_BUS_ID"}
	lines, _ := tn.run("app_linked", "info", "alloc", "2GiB", "alloc", "1MiB")
	wantLines(t, lines, fmt.Sprintf("info free=%d total=%d", 2*gib, 2*gib), "alloc 2147483648 ok",
		"alloc 1048576 CUDA_ERROR_OUT_OF_MEMORY")
}

// Two GPUs with their own quotas: what one GPU has left is not usable on
// the other, and the usage file counts each ordinal on its own.
func TestQuotaPerGPU(t *testing.T) {
	tn := gpuTenant(t, 12, []int{0, 1}, []uint64{1 * gib, 3 * gib}, "0,1")
	h := tn.hold("app_linked", "alloc", "1GiB", "alloc", "1MiB", "device", "1", "alloc", "3GiB", "info")
	wantLines(t, h.lines, "alloc 1073741824 ok", "alloc 1048576 CUDA_ERROR_OUT_OF_MEMORY", "device 1 ok",
		"alloc 3221225472 ok", fmt.Sprintf("info free=0 total=%d", 3*gib))
	s := tn.usage().slotOf(h.cmd.Process.Pid)
	if s == nil || s["bytes"] != fmt.Sprint(4*gib) || s["dev0"] != fmt.Sprint(1*gib) || s["dev1"] != fmt.Sprint(3*gib) {
		t.Fatalf("slot = %v, want bytes=4GiB dev0=1GiB dev1=3GiB", s)
	}
	lines, _ := tn.run("app_linked", "info", "device", "1", "alloc", "1MiB")
	wantLines(t, lines, fmt.Sprintf("info free=0 total=%d", 1*gib), "device 1 ok", "alloc 1048576 CUDA_ERROR_OUT_OF_MEMORY")
	h.kill9(t)
	lines, _ = tn.run("app_linked", "device", "1", "alloc", "3GiB")
	wantLines(t, lines, "device 1 ok", "alloc 3221225472 ok")
}

// A GPU the container was not given has no memory for it, even where it
// can see the GPU (no CUDA_VISIBLE_DEVICES: both fake GPUs are visible).
func TestNoMemoryOnAGPUNotGiven(t *testing.T) {
	tn := gpuTenant(t, 13, []int{0}, []uint64{2 * gib}, "")
	lines, stderr := tn.run("app_linked", "alloc", "1GiB", "device", "1", "alloc", "1MiB")
	wantLines(t, lines, "alloc 1073741824 ok", "device 1 ok", "alloc 1048576 CUDA_ERROR_OUT_OF_MEMORY")
	if !strings.Contains(stderr, "on device 1") {
		t.Fatalf("the refusal's debug line does not name device 1:\n%s", stderr)
	}
}

// Without per-GPU quotas (a quota from quota.gpuext.io alone) the quota
// applies on each GPU on its own.
func TestPolicyQuotaAppliesOnEachGPU(t *testing.T) {
	tn := newTenant(t, 14, 2*gib, "standard")
	tn.extra = []string{"FAKECUDA_DEVICES=2"}
	lines, _ := tn.run("app_linked", "alloc", "2GiB", "alloc", "1MiB", "device", "1", "alloc", "2GiB", "alloc", "1MiB")
	wantLines(t, lines, "alloc 2147483648 ok", "alloc 1048576 CUDA_ERROR_OUT_OF_MEMORY", "device 1 ok",
		"alloc 2147483648 ok", "alloc 1048576 CUDA_ERROR_OUT_OF_MEMORY")
}

// NVML numbers every GPU whose device node the process can reach (all of
// them where the tenant is not in a container), CUDA only those that
// CUDA_VISIBLE_DEVICES names: a tenant given GPU 1 alone sees its quota on
// NVML's entry of GPU 1, the GPU it was given, and no memory on GPU 0's,
// whether the device plugin named GPU 1 by UUID or by index (issue 35).
func TestNVMLQuotaOnTheGPUItWasGiven(t *testing.T) {
	for _, visible := range []string{"GPU-00000000-0000-0000-0000-fa4e00000001", "1"} {
		tn := gpuTenant(t, 16, []int{1}, []uint64{2 * gib}, visible)
		tn.extra = append(tn.extra, "CUDA_DEVICE_ORDER=PCI_BUS_ID")
		lines, _ := tn.run("app_linked", "info", "nvmlidx", "0", "nvmlidx", "1")
		wantLines(t, lines, fmt.Sprintf("info free=%d total=%d", 2*gib, 2*gib), "nvml dev=0 free=0 total=0 used=0",
			fmt.Sprintf("nvml dev=1 free=%d total=%d used=0", 2*gib, 2*gib))
	}
	// without CUDA_VISIBLE_DEVICES (a container given GPU 1's device node
	// alone sees it as NVML's 0 and CUDA's 0): NVML's index is the ordinal
	tn := gpuTenant(t, 17, []int{1}, []uint64{2 * gib}, "")
	tn.extra = []string{"FAKECUDA_DEVICES=1", fmt.Sprintf("FAKECUDA_TOTAL_BYTES=%d", 8*gib)}
	lines, _ := tn.run("app_linked", "nvmlidx", "0")
	wantLines(t, lines, fmt.Sprintf("nvml dev=0 free=%d total=%d used=0", 2*gib, 2*gib))
}
