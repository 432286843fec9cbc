//go:build kernellab

// Scheduling tests: gpusim's TSG runlist through the gpuext sched call
// sites, with the sched_priority and sched_admit policies.

package guest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/bpf/kernelpolicy"
	"github.com/gpuext/gpuext/cgroup"
)

// gpusim's stock TSG values (kmod/gpusim/runlist.c).
const (
	stockTimesliceUs = 1024
	stockInterleave  = 2
)

// tsgState is one TSG line of gpusim's runlist file.
type tsgState struct {
	ctx         string
	tenant      uint32
	timesliceUs uint32
	interleave  uint32
	ops         string
	bind        string
	// From tsg_submit (kmod/gpusim/runlist.c): the last submit's wait for
	// the engine and how often this TSG was preempted.
	waitUs, preempted uint32
}

// schedTenant creates a cgroup and registers it as a tenant with a priority
// class and configured timeslice/interleave (0 = not configured).
func schedTenant(t *testing.T, reg *bpf.Registry, name string, class bpf.PriorityClass, timesliceUs, interleave uint32) (string, bpf.TenantID) {
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
	cfg := bpf.GpuextTenantConfig{
		AbiVersion:    bpf.ABIVersion,
		PriorityClass: uint32(class),
		TimesliceUs:   timesliceUs,
		Interleave:    interleave,
	}
	tid, err := reg.Upsert("lab/"+name, "sched", cfg, bpf.CgroupEntry{CgroupID: cgroup.ID(st.Ino), CgroupPath: "/" + name})
	if err != nil {
		t.Fatalf("register tenant %s: %v", name, err)
	}
	t.Cleanup(func() { reg.ReleaseTenant(tid) })
	return dir, tid
}

// newTSG creates TSG name in gpusim context ctx; the error is the bind result.
func newTSG(t *testing.T, name, ctx string) error {
	t.Helper()
	err := os.WriteFile(gpusimDir+"/runlist", []byte("create "+name+" "+filepath.Base(ctx)), 0)
	t.Cleanup(func() { os.WriteFile(gpusimDir+"/runlist", []byte("destroy "+name), 0) })
	return err
}

func destroyTSG(t *testing.T, name string) {
	t.Helper()
	if err := os.WriteFile(gpusimDir+"/runlist", []byte("destroy "+name), 0); err != nil {
		t.Fatalf("destroy tsg %s: %v", name, err)
	}
}

// runlist reads gpusim's runlist: the TSGs by name and the slot order.
func runlist(t *testing.T) (map[string]tsgState, []string) {
	t.Helper()
	data, err := os.ReadFile(gpusimDir + "/runlist")
	if err != nil {
		t.Fatal(err)
	}
	tsgs := map[string]tsgState{}
	var order []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "order" {
			order = f[1:]
			continue
		}
		if len(f) < 13 || len(f)%2 != 1 {
			t.Fatalf("runlist line %q", line)
		}
		num := func(s string) uint32 { n, _ := strconv.ParseUint(s, 10, 32); return uint32(n) }
		g := tsgState{ctx: f[2], tenant: num(f[4]), timesliceUs: num(f[6]), interleave: num(f[8]), ops: f[10], bind: f[12]}
		for i := 13; i+1 < len(f); i += 2 {
			switch f[i] {
			case "wait_us":
				g.waitUs = num(f[i+1])
			case "preempted":
				g.preempted = num(f[i+1])
			}
		}
		tsgs[f[0]] = g
	}
	return tsgs, order
}

func expectTSG(t *testing.T, tsgs map[string]tsgState, name string, timesliceUs, interleave uint32, ops, bind string) {
	t.Helper()
	g, ok := tsgs[name]
	if !ok {
		t.Errorf("tsg %s not on the runlist", name)
		return
	}
	t.Logf("%s: %+v", name, g)
	if g.timesliceUs != timesliceUs || g.interleave != interleave || g.ops != ops || g.bind != bind {
		t.Errorf("%s: timeslice %dus interleave %d ops %s bind %s, want %dus %d %s %s",
			name, g.timesliceUs, g.interleave, g.ops, g.bind, timesliceUs, interleave, ops, bind)
	}
}

func schedOps(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(gpuextDir + "/sched_ops")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

func count(order []string, name string) int {
	n := 0
	for _, o := range order {
		if o == name {
			n++
		}
	}
	return n
}

// A latency-critical tenant's TSGs get its configured timeslice and
// interleave (and so interleave slots per runlist pass); a best-effort
// tenant gets the policy's long timeslice; a standard tenant, whose class
// sched_priority does not claim, keeps the driver's stock values.
func TestSchedLatencyCriticalTimeslice(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	lcCg, lcID := schedTenant(t, reg, "sched-lc", bpf.PriorityLatencyCritical, 300, 16)
	beCg, _ := schedTenant(t, reg, "sched-be", bpf.PriorityBestEffort, 0, 0)
	stdCg, _ := schedTenant(t, reg, "sched-std", bpf.PriorityStandard, 0, 0)
	prio := attach(t, "sched_priority")
	defer prio.Close()

	lc := gpuCtx(t, "ctx-sched-lc", lcCg)
	be := gpuCtx(t, "ctx-sched-be", beCg)
	std := gpuCtx(t, "ctx-sched-std", stdCg)
	for _, c := range []struct{ tsg, ctx string }{{"lc0", lc}, {"lc1", lc}, {"be0", be}, {"std0", std}} {
		if err := newTSG(t, c.tsg, c.ctx); err != nil {
			t.Fatalf("create tsg %s: %v", c.tsg, err)
		}
	}
	tsgs, order := runlist(t)
	expectTSG(t, tsgs, "lc0", 300, 16, "sched_priority", "admitted")
	expectTSG(t, tsgs, "lc1", 300, 16, "sched_priority", "admitted")
	expectTSG(t, tsgs, "be0", 8000, 1, "sched_priority", "admitted")
	expectTSG(t, tsgs, "std0", stockTimesliceUs, stockInterleave, "stock", "admitted")
	if tsgs["lc0"].tenant != uint32(lcID) {
		t.Errorf("lc0 tenant %d, want %d", tsgs["lc0"].tenant, lcID)
	}
	if n, m := count(order, "lc0"), count(order, "be0"); n != 16 || m != 1 {
		t.Errorf("runlist pass gives lc0 %d slots and be0 %d, want 16 and 1: %v", n, m, order)
	}
	if ops := schedOps(t); !strings.HasPrefix(ops, "sched_priority classes 0x5 calls 3 handled 3 errors 0 refused 0") {
		t.Errorf("sched_ops %q", ops)
	}
}

// Detaching the policy returns the tenant's new TSGs to the stock values.
func TestSchedDetachRestoresStock(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	lcCg, _ := schedTenant(t, reg, "sched-detach", bpf.PriorityLatencyCritical, 400, 8)
	prio := attach(t, "sched_priority")
	defer prio.Close()
	c := gpuCtx(t, "ctx-sched-detach", lcCg)
	if err := newTSG(t, "det0", c); err != nil {
		t.Fatal(err)
	}
	if err := prio.Close(); err != nil {
		t.Fatalf("detach sched_priority: %v", err)
	}
	if err := newTSG(t, "det1", c); err != nil {
		t.Fatal(err)
	}
	tsgs, _ := runlist(t)
	expectTSG(t, tsgs, "det0", 400, 8, "sched_priority", "admitted")
	expectTSG(t, tsgs, "det1", stockTimesliceUs, stockInterleave, "stock", "admitted")
	if ops := schedOps(t); ops != "" {
		t.Errorf("sched ops still listed after detach: %q", ops)
	}
}

// sched_admit refuses a standard tenant's TSG beyond its context limit at
// bind, admits again once one is destroyed, and leaves a tenant without a
// limit alone; sched_priority shapes a latency-critical tenant meanwhile
// (two named sched ops at once, each tenant on its own).
func TestSchedAdmitContextLimit(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	limCg, limID := schedTenant(t, reg, "sched-limited", bpf.PriorityStandard, 0, 0)
	freeCg, _ := schedTenant(t, reg, "sched-free", bpf.PriorityStandard, 0, 0)
	lcCg, _ := schedTenant(t, reg, "sched-lc2", bpf.PriorityLatencyCritical, 0, 0)
	admit := attach(t, "sched_admit")
	defer admit.Close()
	prio := attach(t, "sched_priority")
	defer prio.Close()
	if err := admit.SetContextLimit(uint32(limID), 2); err != nil {
		t.Fatal(err)
	}

	lim := gpuCtx(t, "ctx-limited", limCg)
	free := gpuCtx(t, "ctx-free", freeCg)
	lc := gpuCtx(t, "ctx-lc2", lcCg)
	for _, n := range []string{"lim0", "lim1"} {
		if err := newTSG(t, n, lim); err != nil {
			t.Fatalf("tsg %s under the limit: %v", n, err)
		}
	}
	if err := newTSG(t, "lim2", lim); !errors.Is(err, syscall.EPERM) {
		t.Errorf("third tsg of a tenant limited to 2: %v, want EPERM", err)
	}
	for _, n := range []string{"free0", "free1", "free2"} {
		if err := newTSG(t, n, free); err != nil {
			t.Errorf("tsg %s of a tenant without a limit: %v", n, err)
		}
	}
	if err := newTSG(t, "lc2-0", lc); err != nil {
		t.Fatal(err)
	}
	tsgs, order := runlist(t)
	expectTSG(t, tsgs, "lim0", stockTimesliceUs, stockInterleave, "stock", "admitted")
	expectTSG(t, tsgs, "lim2", stockTimesliceUs, stockInterleave, "stock", "refused")
	expectTSG(t, tsgs, "free2", stockTimesliceUs, stockInterleave, "stock", "admitted")
	expectTSG(t, tsgs, "lc2-0", 500, 32, "sched_priority", "admitted")
	if count(order, "lim2") != 0 {
		t.Errorf("refused tsg lim2 is on the runlist order: %v", order)
	}

	// Destroying a bound TSG frees its slot.
	destroyTSG(t, "lim0")
	destroyTSG(t, "lim2")
	if err := newTSG(t, "lim3", lim); err != nil {
		t.Errorf("tsg after one was destroyed: %v", err)
	}
	ops := schedOps(t)
	t.Logf("sched_ops:\n%s", ops)
	if !strings.Contains(ops, "sched_admit classes 0x2 calls 0 handled 0 errors 0 refused 0 denied 1") {
		t.Errorf("sched_admit counters %q, want one denied bind", ops)
	}
}

// A configured timeslice (or interleave) outside the core's bounds is
// refused, counted, and the TSG gets the stock values.
func TestSchedOutOfRangeTimesliceRefused(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	shortCg, _ := schedTenant(t, reg, "sched-short", bpf.PriorityLatencyCritical, 50, 0)
	wideCg, _ := schedTenant(t, reg, "sched-wide", bpf.PriorityBestEffort, 0, 100)
	prio := attach(t, "sched_priority")
	defer prio.Close()
	if err := newTSG(t, "short0", gpuCtx(t, "ctx-short", shortCg)); err != nil {
		t.Fatal(err)
	}
	if err := newTSG(t, "wide0", gpuCtx(t, "ctx-wide", wideCg)); err != nil {
		t.Fatal(err)
	}
	tsgs, _ := runlist(t)
	expectTSG(t, tsgs, "short0", stockTimesliceUs, stockInterleave, "stock", "admitted")
	expectTSG(t, tsgs, "wide0", stockTimesliceUs, stockInterleave, "stock", "admitted")
	if ops := schedOps(t); !strings.HasPrefix(ops, "sched_priority classes 0x5 calls 2 handled 0 errors 0 refused 2") {
		t.Errorf("sched_ops %q, want 2 calls, 0 handled, 2 refused", ops)
	}
}

// Two attached sched ops never share a priority class; a policy that errs
// at init or answers bind with a value that is neither admit nor refuse
// leaves the stock values and an admitted TSG, and both errors are counted.
func TestSchedErringPolicyIsStock(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	cg, _ := schedTenant(t, reg, "sched-rogue", bpf.PriorityStandard, 0, 0)
	spec, err := loadRogueSched()
	if err != nil {
		t.Fatal(err)
	}
	admit := attach(t, "sched_admit") // claims the standard class too
	if r, err := kernelpolicy.AttachSpec("rogue_sched", spec, "rogue_sched_ops"); err == nil {
		r.Close()
		t.Fatalf("rogue_sched attached over sched_admit's class")
	}
	if err := admit.Close(); err != nil {
		t.Fatal(err)
	}
	rogue, err := kernelpolicy.AttachSpec("rogue_sched", spec, "rogue_sched_ops")
	if err != nil {
		t.Fatalf("attach rogue_sched: %v", err)
	}
	defer rogue.Close()
	if err := newTSG(t, "rogue0", gpuCtx(t, "ctx-sched-rogue", cg)); err != nil {
		t.Errorf("bind with a bogus answer: %v, want admitted", err)
	}
	tsgs, _ := runlist(t)
	expectTSG(t, tsgs, "rogue0", stockTimesliceUs, stockInterleave, "stock", "admitted")
	if ops := schedOps(t); !strings.HasPrefix(ops, "rogue_sched classes 0x2 calls 1 handled 0 errors 2 refused 0 denied 0 ") {
		t.Errorf("sched_ops %q, want rogue_sched with 1 call and 2 errors", ops)
	}
}

// A TSG's admission slot comes back when the TSG is destroyed even if its
// tenant moved to a class that sched_admit does not claim in between.
func TestSchedAdmitSlotReleasedAfterClassChange(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	cg, tid := schedTenant(t, reg, "sched-move", bpf.PriorityStandard, 0, 0)
	admit := attach(t, "sched_admit")
	defer admit.Close()
	if err := admit.SetContextLimit(uint32(tid), 1); err != nil {
		t.Fatal(err)
	}
	setClass := func(class bpf.PriorityClass) {
		t.Helper()
		cfg := bpf.GpuextTenantConfig{AbiVersion: bpf.ABIVersion, PriorityClass: uint32(class)}
		if _, err := reg.Reserve("lab/sched-move", "sched", cfg); err != nil {
			t.Fatalf("set class %d: %v", class, err)
		}
	}
	c := gpuCtx(t, "ctx-sched-move", cg)
	if err := newTSG(t, "move0", c); err != nil {
		t.Fatal(err)
	}
	if err := newTSG(t, "move1", c); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("second tsg of a tenant limited to 1: %v, want EPERM", err)
	}
	destroyTSG(t, "move1")
	setClass(bpf.PriorityLatencyCritical)
	destroyTSG(t, "move0")
	setClass(bpf.PriorityStandard)
	if err := newTSG(t, "move2", c); err != nil {
		t.Errorf("tsg after the only bound one was destroyed: %v, want admitted", err)
	}
}
