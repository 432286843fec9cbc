package bpf

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/lib/testutil"
)

// TestOpenRegistryMountsOnPinDir: a pin directory outside /sys/fs/bpf on
// another filesystem gets a bpf filesystem mounted on itself.
func TestOpenRegistryMountsOnPinDir(t *testing.T) {
	testutil.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "pins", "gpuext")
	r, err := OpenRegistry(dir)
	if err != nil {
		t.Fatalf("OpenRegistry on tmpfs/ext4: %v", err)
	}
	t.Cleanup(func() {
		r.Close()
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	if r.MountedBPFFS() != dir || !OnBPFFS(dir) {
		t.Fatalf("mounted %q (bpffs at %s: %v), want a bpf filesystem on the pin dir", r.MountedBPFFS(), dir, OnBPFFS(dir))
	}
	if _, err := os.Stat(filepath.Join(dir, "gpuext_tenants")); err != nil {
		t.Fatalf("registry not pinned in the mounted bpffs: %v", err)
	}
}

// The map specs and the generated Go types come from the same header: the
// sizes the kernel will check must be the sizes Go marshals.
func TestRegistrySpecMatchesGoTypes(t *testing.T) {
	spec, err := loadRegistry()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][2]any{
		"gpuext_cgroups":     {uint64(0), GpuextTenantConfig{}},
		"gpuext_cg_meta":     {uint64(0), GpuextCgroupMeta{}},
		"gpuext_tenants":     {uint32(0), GpuextTenantRecord{}},
		"gpuext_tenant_keys": {GpuextTenantKey{}, uint32(0)},
		"gpuext_stats":       {uint32(0), GpuextTenantStats{}},
	} {
		ms := spec.Maps[name]
		if ms == nil {
			t.Fatalf("no map %s in registry spec", name)
		}
		if ms.Type != ebpf.Hash || ms.Pinning != ebpf.PinByName {
			t.Errorf("%s: type %v pinning %v, want hash pinned by name", name, ms.Type, ms.Pinning)
		}
		if int(ms.KeySize) != binary.Size(want[0]) || int(ms.ValueSize) != binary.Size(want[1]) {
			t.Errorf("%s: key/value %d/%d bytes, Go types %d/%d", name, ms.KeySize, ms.ValueSize, binary.Size(want[0]), binary.Size(want[1]))
		}
	}
	if spec.Maps["gpuext_cgroups"].MaxEntries != uint32(MaxCgroups) || spec.Maps["gpuext_tenants"].MaxEntries != uint32(MaxTenants) {
		t.Error("max entries do not follow GPUEXT_MAX_CGROUPS / GPUEXT_MAX_TENANTS")
	}
	if ABIVersion == 0 || MaxKeyLen != len(GpuextTenantKey{}.Key)-1 {
		t.Errorf("ABI constants: version %d, key len %d", ABIVersion, MaxKeyLen)
	}
}
