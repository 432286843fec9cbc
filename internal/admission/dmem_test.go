package admission

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/cgroup"
)

// dmemHost is a fixture host root whose cgroup v2 root offers dmem with
// gpusim's region, and a tenant cgroup /pods/ctr.
func dmemHost(t *testing.T, controllers, capacity string) (*cgroup.Resolver, string) {
	t.Helper()
	root := t.TempDir()
	v2 := filepath.Join(root, "sys/fs/cgroup")
	write := func(p, s string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(v2, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(v2, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cgroup.controllers", controllers)
	write("dmem.capacity", capacity)
	write("cgroup.subtree_control", "")
	write("pods/cgroup.subtree_control", "")
	write("pods/ctr/dmem.max", "nvidia/0000:ee:00.0/vidmem max\n")
	r, err := cgroup.NewResolver(root)
	if err != nil {
		t.Fatal(err)
	}
	return r, v2
}

func TestApplyDmem(t *testing.T) {
	res, v2 := dmemHost(t, "memory dmem\n", "nvidia/0000:ee:00.0/vidmem 1073741824\n")
	dm, err := res.Dmem()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ApplyDmem(res, dm, "/pods/ctr", []DmemQuota{
		{GPU: 0, PCIBusID: "00000000:EE:00.0", Bytes: 4 << 30},
		{GPU: 1, PCIBusID: "00000000:17:00.0", Bytes: 4 << 30}, // no region: the next layer
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Held) != 1 || got.Held[0].Region != "nvidia/0000:ee:00.0/vidmem" ||
		len(got.NoRegion) != 1 || got.NoRegion[0].GPU != 1 || strings.Join(got.Enabled, ",") != "/,/pods" {
		t.Fatalf("ApplyDmem = %+v", got)
	}
	b, _ := os.ReadFile(filepath.Join(v2, "pods/ctr/dmem.max"))
	if !strings.HasPrefix(string(b), "nvidia/0000:ee:00.0/vidmem 4294967296") {
		t.Fatalf("dmem.max = %q", b)
	}
	max, err := res.DmemMax("/pods/ctr")
	if err != nil {
		t.Fatal(err)
	}
	if l := EnforcingLayer(max, 4<<30); l != LayerDmem {
		t.Fatalf("layer = %q, want dmem", l)
	}
	// A bus id that is not one fails, naming it.
	if _, err := ApplyDmem(res, dm, "/pods/ctr", []DmemQuota{{GPU: 2, PCIBusID: "GPU-1234"}}); !errors.Is(err, cgroup.ErrBadPCIBusID) ||
		!strings.Contains(err.Error(), "GPU 2") {
		t.Fatalf("bad bus id: %v", err)
	}
}

// TestApplyDmemFallsThrough: no controller is cgroup.ErrNoDmem and writes
// nothing; a tenant without a quota leaves a tree without dmem as it is; the
// controller without any region (NVIDIA before r615) holds nothing and
// enables nothing, without an error.
func TestApplyDmemFallsThrough(t *testing.T) {
	res, v2 := dmemHost(t, "memory\n", "")
	dm, _ := res.Dmem()
	if _, err := ApplyDmem(res, dm, "/pods/ctr", []DmemQuota{{GPU: 0, PCIBusID: "0000:ee:00.0", Bytes: 1}}); !errors.Is(err, cgroup.ErrNoDmem) {
		t.Fatalf("no controller: %v", err)
	}
	// No quota on a cgroup that never had dmem.max: the tree is not touched.
	res, v2 = dmemHost(t, "memory dmem\n", "nvidia/0000:ee:00.0/vidmem 1073741824\n")
	dm, _ = res.Dmem()
	if err := os.MkdirAll(filepath.Join(v2, "pods/nolimit"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := ApplyDmem(res, dm, "/pods/nolimit", []DmemQuota{{GPU: 0, PCIBusID: "0000:ee:00.0"}})
	if err != nil || len(got.Held) != 0 || len(got.Enabled) != 0 {
		t.Fatalf("no quota: %+v, %v", got, err)
	}
	if b, _ := os.ReadFile(filepath.Join(v2, "cgroup.subtree_control")); len(b) != 0 {
		t.Fatalf("subtree_control written for a tenant without a quota: %q", b)
	}
	// A quota lifted by a policy change: dmem.max is there, "max" is written.
	if got, err := ApplyDmem(res, dm, "/pods/ctr", []DmemQuota{{GPU: 0, PCIBusID: "0000:ee:00.0"}}); err != nil || len(got.Held) != 1 {
		t.Fatalf("lifting a quota: %+v, %v", got, err)
	}
	if b, _ := os.ReadFile(filepath.Join(v2, "pods/ctr/dmem.max")); !strings.HasPrefix(string(b), "nvidia/0000:ee:00.0/vidmem max") {
		t.Fatalf("dmem.max after lifting = %q", b)
	}
	res, v2 = dmemHost(t, "memory dmem\n", "")
	dm, _ = res.Dmem()
	got, err = ApplyDmem(res, dm, "/pods/ctr", []DmemQuota{{GPU: 0, PCIBusID: "0000:ee:00.0", Bytes: 1}})
	if err != nil || len(got.Held) != 0 || len(got.NoRegion) != 1 || len(got.Enabled) != 0 {
		t.Fatalf("no region: %+v, %v", got, err)
	}
	if b, _ := os.ReadFile(filepath.Join(v2, "cgroup.subtree_control")); len(b) != 0 {
		t.Fatalf("subtree_control written without a region to hold: %q", b)
	}
}

func TestEnforcingLayer(t *testing.T) {
	for _, c := range []struct {
		max   map[string]cgroup.DmemValue
		quota uint64
		want  string
	}{
		{map[string]cgroup.DmemValue{"nvidia/0000:ee:00.0/vidmem": {Bytes: 1}}, 1, LayerDmem},
		{map[string]cgroup.DmemValue{"nvidia/0000:ee:00.0/vidmem": {Unlimited: true}}, 1, LayerDevrt},
		{nil, 1, LayerDevrt},
		{nil, 0, "-"},
	} {
		if got := EnforcingLayer(c.max, c.quota); got != c.want {
			t.Errorf("EnforcingLayer(%v, %d) = %q, want %q", c.max, c.quota, got, c.want)
		}
	}
}

func TestDmemNoticeOnce(t *testing.T) {
	var n dmemNotice
	if !n.once("a") || n.once("a") || !n.once("b") {
		t.Fatal("once is not once per key")
	}
}

// TestTenantQuotas: the quota per GPU comes from the tenant's config.json:
// the GPUs the scheduler gave it, by their bus ids from discovery; with none
// listed, QuotaBytes on every GPU of the node, or on every NVIDIA region
// when discovery did not run.
func TestTenantQuotas(t *testing.T) {
	state := t.TempDir()
	c := &Core{cfg: Config{StateDir: state}, resolver: &cgroup.Resolver{HostRoot: t.TempDir()}} // no cgroups there
	writeTF := func(id uint64, tf string) {
		d := TenantDir(state, id)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, TenantConfigFile), []byte(tf), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeTF(1, `{"quotaBytes": 8, "gpus": [1], "gpuQuotaBytes": [8]}`)
	writeTF(2, `{"quotaBytes": 5}`)
	dm := cgroup.Dmem{Controller: true, Regions: []cgroup.DmemRegion{
		{Name: "nvidia/0000:17:00.0/vidmem"}, {Name: "nvidia/0000:18:00.0/vidmem"}, {Name: "drm/0000:03:00.0/vram0"}}}

	// Without discovery: GPU indices cannot be mapped (said, not guessed);
	// a quota on every GPU goes to every NVIDIA region.
	if _, err := c.tenantQuotas(1, dm); !errors.Is(err, errNoBusID) {
		t.Fatalf("tenant 1 without discovery: %v", err)
	}
	q, err := c.tenantQuotas(2, dm)
	if err != nil || len(q) != 2 || q[0].Region != "nvidia/0000:17:00.0/vidmem" || q[1].Bytes != 5 {
		t.Fatalf("tenant 2 without discovery: %+v, %v", q, err)
	}

	c.SetNodeGPUs([]NodeGPU{{Index: 0, PCIBusID: "00000000:17:00.0"}, {Index: 1, PCIBusID: "00000000:18:00.0"}})
	q, err = c.tenantQuotas(1, dm)
	if err != nil || len(q) != 1 || q[0].GPU != 1 || q[0].PCIBusID != "00000000:18:00.0" || q[0].Bytes != 8 {
		t.Fatalf("tenant 1: %+v, %v", q, err)
	}
	q, err = c.tenantQuotas(2, dm)
	if err != nil || len(q) != 2 || q[0].GPU != 0 || q[1].GPU != 1 || q[1].Bytes != 5 {
		t.Fatalf("tenant 2: %+v, %v", q, err)
	}
	if _, err := c.tenantQuotas(3, dm); err == nil {
		t.Fatal("a tenant without config.json has quotas")
	}
}
