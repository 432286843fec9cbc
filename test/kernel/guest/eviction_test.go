//go:build kernellab

// The guest tests run only inside the kernel lab's qemu guest, where
// gpuext.ko and gpusim.ko are loaded: test/kernel/lab.sh builds them with
// -tags kernellab. A plain `go test ./...` on the host does not build them.

package guest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/bpf/kernelpolicy"
	"github.com/gpuext/gpuext/cgroup"
)

const (
	gpusimDir = "/sys/kernel/debug/gpusim"
	gpuextDir = "/sys/kernel/debug/gpuext"
)

// evictResult is what gpusim's <ctx>/evict file reports for the last eviction.
type evictResult struct {
	ops     string
	order   string
	refused int
	cgroup  uint64
	tenant  uint32
}

func requireLab(t *testing.T) {
	t.Helper()
	for _, p := range []string{"/sys/module/gpuext", "/sys/module/gpusim", gpusimDir + "/ctl"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("kernel lab not set up (%v): run under test/kernel/lab.sh", err)
		}
	}
}

// openRegistry opens the control plane's registry and hands its cgroup map to the core.
func openRegistry(t *testing.T) *bpf.Registry {
	t.Helper()
	reg, err := bpf.OpenRegistry("")
	if err != nil {
		t.Fatalf("open registry: %v", err)
	}
	t.Cleanup(func() { reg.Close() })
	fd := reg.Maps().Cgroups.FD()
	if err := os.WriteFile(gpuextDir+"/registry", []byte(strconv.Itoa(fd)), 0); err != nil {
		t.Fatalf("hand registry map to gpuext: %v", err)
	}
	return reg
}

// tenantCgroup creates a cgroup, registers it as tenant key with the eviction policy.
func tenantCgroup(t *testing.T, reg *bpf.Registry, name string, ev bpf.EvictionPolicy) (string, cgroup.ID) {
	t.Helper()
	return tenantCgroupConfig(t, reg, name, bpf.GpuextTenantConfig{AbiVersion: bpf.ABIVersion, EvictionPolicy: uint32(ev)})
}

// tenantCgroupConfig creates a cgroup and registers it as tenant key with cfg.
func tenantCgroupConfig(t *testing.T, reg *bpf.Registry, name string, cfg bpf.GpuextTenantConfig) (string, cgroup.ID) {
	t.Helper()
	dir := filepath.Join("/sys/fs/cgroup", name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("mkdir cgroup: %v", err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	id := cgroup.ID(st.Ino) // cgroup v2 id == inode number of the directory
	tid, err := reg.Upsert("lab/"+name, name, cfg, bpf.CgroupEntry{CgroupID: id, CgroupPath: "/" + name})
	if err != nil {
		t.Fatalf("register tenant %s: %v", name, err)
	}
	t.Cleanup(func() { reg.ReleaseTenant(tid) })
	return dir, id
}

// gpuCtx creates a gpusim context from a process inside cgroup dir, so the
// core attributes it to that cgroup.
func gpuCtx(t *testing.T, name, cgDir string) string {
	t.Helper()
	return gpuCtxCmd(t, "create", name, cgDir)
}

// gpuCtxCmd is gpuCtx with gpusim's create command: "create" or
// "create-nomigrate" (a context without migrate ops, like an RM channel group).
func gpuCtxCmd(t *testing.T, create, name, cgDir string) string {
	t.Helper()
	script := fmt.Sprintf("echo $$ > %s/cgroup.procs && echo '%s %s' > %s/ctl", cgDir, create, name, gpusimDir)
	if out, err := exec.Command("/bin/sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("create gpu context %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { os.WriteFile(gpusimDir+"/ctl", []byte("destroy "+name), 0) })
	return filepath.Join(gpusimDir, name)
}

func ctl(t *testing.T, ctx string, cmds ...string) {
	t.Helper()
	for _, c := range cmds {
		if err := os.WriteFile(ctx+"/ctl", []byte(c), 0); err != nil {
			t.Fatalf("%s: %q: %v", filepath.Base(ctx), c, err)
		}
	}
}

// workload: chunks arrive as 3 1 4 2 5 (the driver lists them by id, 1..5),
// then 3 and 4 are touched again.  FIFO evicts 3 1 4 2 5; LRU (also the
// driver's stock order) evicts 1 2 5 3 4.
func workload(t *testing.T, ctx string) {
	ctl(t, ctx, "alloc 3", "alloc 1", "alloc 4", "alloc 2", "alloc 5", "touch 3", "touch 4")
}

const (
	fifoOrder = "3 1 4 2 5"
	lruOrder  = "1 2 5 3 4"
)

func evict(t *testing.T, ctx string) evictResult {
	t.Helper()
	ctl(t, ctx, "evict")
	data, err := os.ReadFile(ctx + "/evict")
	if err != nil {
		t.Fatal(err)
	}
	var r evictResult
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		k, v, _ := strings.Cut(line, " ")
		switch k {
		case "ops":
			r.ops = v
		case "order":
			r.order = v
		case "refused":
			r.refused, _ = strconv.Atoi(v)
		case "cgroup":
			r.cgroup, _ = strconv.ParseUint(v, 10, 64)
		case "tenant":
			n, _ := strconv.ParseUint(v, 10, 32)
			r.tenant = uint32(n)
		}
	}
	t.Logf("%s: ops=%s order=[%s] refused=%d cgroup=%d tenant=%d",
		filepath.Base(ctx), r.ops, r.order, r.refused, r.cgroup, r.tenant)
	return r
}

func expect(t *testing.T, what string, r evictResult, ops, order string) {
	t.Helper()
	if r.ops != ops || r.order != order {
		t.Errorf("%s: got ops %q order [%s], want ops %q order [%s]", what, r.ops, r.order, ops, order)
	}
}

func attach(t *testing.T, name string) *kernelpolicy.Attached {
	t.Helper()
	a, err := kernelpolicy.Attach(name)
	if err != nil {
		t.Fatalf("attach %s: %v", name, err)
	}
	return a
}

func TestTwoPoliciesEvictionOrder(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	fifoCg, fifoID := tenantCgroup(t, reg, "tenant-fifo", bpf.EvictFIFO)
	lruCg, _ := tenantCgroup(t, reg, "tenant-lru", bpf.EvictLRU)

	fifo := attach(t, "fifo")
	lru := attach(t, "lru")
	defer fifo.Close()
	defer lru.Close()

	a := gpuCtx(t, "ctx-fifo", fifoCg)
	b := gpuCtx(t, "ctx-lru", lruCg)
	workload(t, a)
	workload(t, b)

	ra := evict(t, a)
	if ra.cgroup != uint64(fifoID) || ra.tenant == 0 {
		t.Errorf("ctx-fifo attributed to cgroup %d tenant %d, want cgroup %d and a tenant", ra.cgroup, ra.tenant, fifoID)
	}
	expect(t, "fifo tenant", ra, "fifo", fifoOrder)
	expect(t, "lru tenant", evict(t, b), "lru", lruOrder)

	// Detach FIFO: its tenant is back on the driver's stock order, LRU stays.
	if err := fifo.Close(); err != nil {
		t.Fatalf("detach fifo: %v", err)
	}
	expect(t, "fifo tenant after detach", evict(t, a), "stock", lruOrder)
	expect(t, "lru tenant after fifo detach", evict(t, b), "lru", lruOrder)

	if err := lru.Close(); err != nil {
		t.Fatalf("detach lru: %v", err)
	}
	expect(t, "lru tenant after detach", evict(t, b), "stock", lruOrder)
	if ops, _ := os.ReadFile(gpuextDir + "/ops"); strings.TrimSpace(string(ops)) != "" {
		t.Errorf("ops still listed after detach: %q", ops)
	}
}

func TestUnregisteredContextIsStock(t *testing.T) {
	requireLab(t)
	openRegistry(t)
	fifo := attach(t, "fifo")
	defer fifo.Close()
	cg := filepath.Join("/sys/fs/cgroup", "unregistered")
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(cg)
	c := gpuCtx(t, "ctx-unreg", cg)
	workload(t, c)
	r := evict(t, c)
	expect(t, "unregistered cgroup", r, "stock", lruOrder)
	if r.tenant != 0 {
		t.Errorf("tenant %d for an unregistered cgroup", r.tenant)
	}
}

func TestOutOfRangeRequestRefused(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	cg, _ := tenantCgroup(t, reg, "tenant-rogue", bpf.EvictMRU)
	spec, err := loadRogue()
	if err != nil {
		t.Fatal(err)
	}
	rogue, err := kernelpolicy.AttachSpec("rogue", spec, "rogue_ops")
	if err != nil {
		t.Fatalf("attach rogue: %v", err)
	}
	defer rogue.Close()
	c := gpuCtx(t, "ctx-rogue", cg)
	workload(t, c)

	r := evict(t, c)
	expect(t, "refused request", r, "stock", lruOrder)
	if r.refused != 1 {
		t.Errorf("refused %d requests in one call, want 1", r.refused)
	}
	evict(t, c)
	ops, _ := os.ReadFile(gpuextDir + "/ops")
	t.Logf("gpuext ops: %s", strings.TrimSpace(string(ops)))
	if !strings.Contains(string(ops), "mru calls 2 handled 0 errors 0 refused 2") {
		t.Errorf("core counters %q, want mru calls 2 handled 0 errors 0 refused 2", ops)
	}
}
