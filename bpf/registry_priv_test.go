package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/cgroup"
)

func testConfig(prio PriorityClass, quota uint64) GpuextTenantConfig {
	return GpuextTenantConfig{
		Flags:          uint32(TenantFlagQuota),
		PriorityClass:  uint32(prio),
		EvictionPolicy: uint32(EvictLFU),
		PrefetchPolicy: uint32(PrefetchStride),
		QuotaBytes:     quota,
		ProbeCount:     2,
		ProbeIds:       [8]uint32{7, 9},
	}
}

func entry(cg cgroup.ID, ctr string) CgroupEntry {
	return CgroupEntry{
		CgroupID:      cg,
		CgroupPath:    fmt.Sprintf("/kubepods/besteffort/pod-x/%s", ctr),
		ContainerID:   ctr,
		ContainerName: "name-" + ctr,
		PodName:       "pod",
		PodNamespace:  "default",
		Runtime:       RuntimeNRI,
	}
}

// cgroupConfig reads what the kernel side would read for cg.
func cgroupConfig(t *testing.T, r *Registry, cg cgroup.ID) (GpuextTenantConfig, bool) {
	t.Helper()
	var cfg GpuextTenantConfig
	k := uint64(cg)
	err := r.Maps().Cgroups.Lookup(&k, &cfg)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return cfg, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return cfg, true
}

func countEntries(t *testing.T, m *ebpf.Map) int {
	t.Helper()
	n := 0
	keys := make([]byte, m.KeySize())
	values := make([]byte, m.ValueSize())
	it := m.Iterate()
	for it.Next(&keys, &values) {
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRegistryRoundTrip(t *testing.T) {
	requireRoot(t)
	dir := newPinDir(t)
	r, err := OpenRegistry(dir)
	if err != nil {
		t.Fatal(err)
	}

	type reg struct {
		key, policy string
		cfg         GpuextTenantConfig
		cgs         []cgroup.ID
	}
	regs := []reg{
		{"pod/a", "latency-critical", testConfig(PriorityLatencyCritical, 1<<30), []cgroup.ID{1001, 1002}},
		{"pod/b", "best-effort", testConfig(PriorityBestEffort, 2<<30), []cgroup.ID{2001, 2002}},
		{"ctr/c", "standard", testConfig(PriorityStandard, 0), []cgroup.ID{3001}},
	}
	ids := map[string]TenantID{}
	for _, g := range regs {
		for _, cg := range g.cgs {
			id, err := r.Upsert(g.key, g.policy, g.cfg, entry(cg, fmt.Sprintf("ctr%d", cg)))
			if err != nil {
				t.Fatalf("Upsert(%s, %d): %v", g.key, cg, err)
			}
			if id == 0 || uint32(id) >= idSpace {
				t.Fatalf("Upsert(%s) = id %d, want 1..%d", g.key, id, idSpace-1)
			}
			if prev, ok := ids[g.key]; ok && prev != id {
				t.Fatalf("Upsert(%s) = %d, earlier %d", g.key, id, prev)
			}
			ids[g.key] = id
		}
	}
	if ids["pod/a"] == ids["pod/b"] || ids["pod/b"] == ids["ctr/c"] || ids["pod/a"] == ids["ctr/c"] {
		t.Fatalf("ids not unique: %v", ids)
	}

	// What the kernel reads: the config with the tenant id and ABI version.
	for _, g := range regs {
		for _, cg := range g.cgs {
			got, ok := cgroupConfig(t, r, cg)
			want := g.cfg
			want.TenantId = uint32(ids[g.key])
			want.AbiVersion = ABIVersion
			if !ok || got != want {
				t.Fatalf("gpuext_cgroups[%d] = %+v (present %v), want %+v", cg, got, ok, want)
			}
		}
	}

	before, err := r.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 3 {
		t.Fatalf("List: %d tenants, want 3: %+v", len(before), before)
	}
	for i := 1; i < len(before); i++ {
		if before[i-1].ID >= before[i].ID {
			t.Fatalf("List not sorted by id: %v, %v", before[i-1].ID, before[i].ID)
		}
	}
	for _, tn := range before {
		var g reg
		for _, x := range regs {
			if x.key == tn.Key {
				g = x
			}
		}
		if tn.ID != ids[g.key] || tn.Policy != g.policy || len(tn.Cgroups) != len(g.cgs) {
			t.Fatalf("List entry %+v does not match %+v (id %d)", tn, g, ids[g.key])
		}
		for i, c := range tn.Cgroups {
			if want := entry(g.cgs[i], fmt.Sprintf("ctr%d", g.cgs[i])); c != want {
				t.Fatalf("tenant %s cgroup %d = %+v, want %+v", g.key, i, c, want)
			}
		}
	}

	// Restart: a new handle on the same pins sees exactly the same state.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r = openTestRegistry(t, dir)
	after, err := r.List()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("List after reopen differs:\nbefore %+v\nafter  %+v", before, after)
	}

	// Lookups.
	tn, err := r.Lookup(1002)
	if err != nil || tn.ID != ids["pod/a"] || len(tn.Cgroups) != 2 {
		t.Fatalf("Lookup(1002) = %+v, %v", tn, err)
	}
	if _, err := r.Lookup(4242); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Lookup(unknown) err = %v, want ErrNotFound", err)
	}
	if id, ok, err := r.LookupKey("pod/b"); err != nil || !ok || id != ids["pod/b"] {
		t.Fatalf("LookupKey(pod/b) = %d, %v, %v", id, ok, err)
	}
	if _, ok, err := r.LookupKey("pod/none"); err != nil || ok {
		t.Fatalf("LookupKey(unknown) = %v, %v", ok, err)
	}
	if st, err := r.Stats(ids["pod/a"]); err != nil || st != (GpuextTenantStats{}) {
		t.Fatalf("Stats(new tenant) = %+v, %v", st, err)
	}

	// Key reuse is idempotent and the new config reaches attached cgroups.
	newCfg := testConfig(PriorityStandard, 3<<30)
	id, err := r.Reserve("pod/a", "standard", newCfg)
	if err != nil || id != ids["pod/a"] {
		t.Fatalf("Reserve(pod/a) again = %d, %v; want %d", id, err, ids["pod/a"])
	}
	for _, cg := range []cgroup.ID{1001, 1002} {
		got, _ := cgroupConfig(t, r, cg)
		if got.QuotaBytes != 3<<30 || got.PriorityClass != uint32(PriorityStandard) || got.TenantId != uint32(id) {
			t.Fatalf("cgroup %d config after re-Reserve = %+v", cg, got)
		}
	}
	if tn, _ := r.Lookup(1001); tn.Policy != "standard" {
		t.Fatalf("policy after re-Reserve = %q", tn.Policy)
	}

	// Detach: the tenant stays while it has cgroups, goes with the last.
	if got, err := r.Detach(1001); err != nil || got != ids["pod/a"] {
		t.Fatalf("Detach(1001) = %d, %v", got, err)
	}
	if _, ok, _ := r.LookupKey("pod/a"); !ok {
		t.Fatal("tenant pod/a released while it still has cgroup 1002")
	}
	if got, err := r.Detach(1002); err != nil || got != ids["pod/a"] {
		t.Fatalf("Detach(1002) = %d, %v", got, err)
	}
	if _, ok, _ := r.LookupKey("pod/a"); ok {
		t.Fatal("tenant pod/a not released after its last cgroup left")
	}
	if _, err := r.Stats(ids["pod/a"]); !errors.Is(err, ErrNoTenant) {
		t.Fatalf("Stats(released) err = %v, want ErrNoTenant", err)
	}
	if _, ok := cgroupConfig(t, r, 1002); ok {
		t.Fatal("gpuext_cgroups still has detached cgroup 1002")
	}
	if _, err := r.Detach(1002); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Detach(1002) twice err = %v, want ErrNotFound", err)
	}

	// ReleaseTenant takes all cgroups with it.
	if err := r.ReleaseTenant(ids["pod/b"]); err != nil {
		t.Fatal(err)
	}
	for _, cg := range []cgroup.ID{2001, 2002} {
		if _, ok := cgroupConfig(t, r, cg); ok {
			t.Fatalf("gpuext_cgroups still has cgroup %d of a released tenant", cg)
		}
	}
	if err := r.ReleaseTenant(ids["pod/b"]); !errors.Is(err, ErrNoTenant) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReleaseTenant twice err = %v, want ErrNoTenant (and ErrNotFound)", err)
	}

	// A reserved, never attached tenant is not released by Detach.
	idD, err := r.Reserve("pod/d", "standard", testConfig(PriorityStandard, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Detach(3001); err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := r.LookupKey("pod/d"); !ok || got != idD {
		t.Fatal("reserved-only tenant pod/d vanished")
	}
	if err := r.Attach(idD, entry(5001, "ctr5001")); err != nil {
		t.Fatal(err)
	}

	// Re-reserving a released key gets a working tenant again.
	idA, err := r.Upsert("pod/a", "standard", newCfg, entry(1001, "ctr1001"))
	if err != nil {
		t.Fatal(err)
	}
	if tn, err := r.Lookup(1001); err != nil || tn.ID != idA || tn.Key != "pod/a" {
		t.Fatalf("Lookup after re-Upsert = %+v, %v", tn, err)
	}

	final, err := r.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(final) != 2 {
		t.Fatalf("final List = %+v, want pod/a and pod/d", final)
	}
	m := r.Maps()
	for name, want := range map[string]int{"tenants": 2, "keys": 2, "stats": 2, "cgroups": 2, "meta": 2} {
		mp := map[string]*ebpf.Map{"tenants": m.Tenants, "keys": m.TenantKeys, "stats": m.Stats, "cgroups": m.Cgroups, "meta": m.CgroupMeta}[name]
		if got := countEntries(t, mp); got != want {
			t.Errorf("%s map has %d entries, want %d", name, got, want)
		}
	}
}

func TestRegistryInputErrors(t *testing.T) {
	requireRoot(t)
	r := openTestRegistry(t, newPinDir(t))
	cfg := testConfig(PriorityStandard, 0)

	long := strings.Repeat("k", MaxKeyLen+1)
	if _, err := r.Reserve(long, "p", cfg); err == nil || !strings.Contains(err.Error(), "tenant key") {
		t.Fatalf("Reserve(long key) err = %v, want one naming the tenant key", err)
	}
	if _, err := r.Reserve(strings.Repeat("k", MaxKeyLen), "p", cfg); err != nil {
		t.Fatalf("Reserve(key of exactly %d bytes): %v", MaxKeyLen, err)
	}
	if _, err := r.Reserve("", "p", cfg); err == nil {
		t.Fatal("Reserve(empty key) succeeded")
	}
	if _, err := r.Reserve("k", strings.Repeat("p", MaxNameLen+1), cfg); err == nil || !strings.Contains(err.Error(), "policy") {
		t.Fatalf("Reserve(long policy) err = %v", err)
	}
	bad := cfg
	bad.ProbeCount = 9
	if _, err := r.Reserve("k", "p", bad); err == nil || !strings.Contains(err.Error(), "probe_count") {
		t.Fatalf("Reserve(probe_count 9) err = %v", err)
	}

	id, err := r.Reserve("k", "p", cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := entry(77, strings.Repeat("c", MaxKeyLen+1))
	if err := r.Attach(id, e); err == nil || !strings.Contains(err.Error(), "container id") {
		t.Fatalf("Attach(long container id) err = %v", err)
	}
	if err := r.Attach(id, entry(0, "x")); err == nil {
		t.Fatal("Attach(cgroup 0) succeeded")
	}
	if err := r.Attach(id+1, entry(78, "x")); !errors.Is(err, ErrNoTenant) {
		t.Fatalf("Attach(unknown tenant) err = %v, want ErrNoTenant", err)
	}

	// Display-only fields are cut to fit, at a rune boundary.
	e = entry(79, "ctr79")
	e.PodName = strings.Repeat("é", 40) // 80 bytes
	e.CgroupPath = "/" + strings.Repeat("p", 400)
	if err := r.Attach(id, e); err != nil {
		t.Fatal(err)
	}
	tn, err := r.Lookup(79)
	if err != nil {
		t.Fatal(err)
	}
	got := tn.Cgroups[0]
	if got.PodName != strings.Repeat("é", 31) {
		t.Fatalf("truncated pod name = %q (%d bytes)", got.PodName, len(got.PodName))
	}
	if len(got.CgroupPath) != 255 || !strings.HasPrefix(e.CgroupPath, got.CgroupPath) {
		t.Fatalf("truncated cgroup path has %d bytes", len(got.CgroupPath))
	}
}

func TestRegistryPinPermissions(t *testing.T) {
	requireRoot(t)
	dir := newPinDir(t)
	openTestRegistry(t, dir)

	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Errorf("pin dir mode %v, want 0700", st.Mode().Perm())
	}
	for _, name := range []string{"gpuext_cgroups", "gpuext_cg_meta", "gpuext_tenants", "gpuext_tenant_keys", "gpuext_stats"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("pin %s: %v", name, err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("pin %s mode %v, want 0600", name, st.Mode().Perm())
		}
	}

	// The test binary lives in a 0700 build dir: give nobody a copy it can run.
	bin := copyTestBinary(t)
	asNobody := func() string {
		t.Helper()
		cmd := helperCmd(t, "open-pin", "GPUEXT_PIN="+filepath.Join(dir, "gpuext_cgroups"))
		cmd.Path = bin
		cmd.Args[0] = bin
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("helper as nobody: %v\n%s", err, out)
		}
		t.Logf("as uid 65534: %s", strings.Join(strings.Fields(string(out)), " "))
		return string(out)
	}

	// The 0700 dir stops nobody at path lookup, whatever the bpf sysctls say.
	out := asNobody()
	if !strings.Contains(out, "stat=EACCES") || !strings.Contains(out, "open=EACCES") {
		t.Errorf("nobody reached a pin in a 0700 dir: %q", out)
	}

	// With the dir opened up, the 0600 pin alone still refuses nobody.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out = asNobody()
	if !strings.Contains(out, "stat=ok") {
		t.Errorf("nobody cannot stat the pin in a 0755 dir: %q", out)
	}
	if !strings.Contains(out, "open=EACCES") && !strings.Contains(out, "open=EPERM") {
		t.Errorf("nobody opened a 0600 pin: %q", out)
	}
	// Reopening restores the dir mode.
	openTestRegistry(t, dir)
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("OpenRegistry did not restore the pin dir to 0700 (%v)", err)
	}
}

func copyTestBinary(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gpuext-bpf-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bpf.test")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

func TestRegistryABIMismatch(t *testing.T) {
	requireRoot(t)
	dir := newPinDir(t)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 8, ValueSize: 64, MaxEntries: uint32(MaxCgroups)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Pin(filepath.Join(dir, "gpuext_cgroups")); err != nil {
		t.Fatal(err)
	}

	_, err = OpenRegistry(dir)
	if !errors.Is(err, ErrABIMismatch) || !errors.Is(err, ebpf.ErrMapIncompatible) {
		t.Fatalf("OpenRegistry over a wrong pin: err = %v, want ErrABIMismatch and ebpf.ErrMapIncompatible", err)
	}
	// The mismatch as ebpf.MapSpec.Compatible names it: the pin's value, then this build's.
	want := fmt.Sprintf("pinned map gpuext_cgroups: ValueSize: 64 changed to %d", binary.Size(GpuextTenantConfig{}))
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("error %q does not say %q and name %s", err, want, dir)
	}
}

// A pin of the right sizes but other map flags (here not preallocated) is
// also another build's: the old size-only check let it through.
func TestRegistryABIMismatchFlags(t *testing.T) {
	requireRoot(t)
	dir := newPinDir(t)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 8, ValueSize: uint32(binary.Size(GpuextTenantConfig{})),
		MaxEntries: uint32(MaxCgroups), Flags: unix.BPF_F_NO_PREALLOC})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Pin(filepath.Join(dir, "gpuext_cgroups")); err != nil {
		t.Fatal(err)
	}

	_, err = OpenRegistry(dir)
	if !errors.Is(err, ErrABIMismatch) {
		t.Fatalf("OpenRegistry over a pin with other flags: err = %v, want ErrABIMismatch", err)
	}
	want := fmt.Sprintf("pinned map gpuext_cgroups: Flags: %d changed to 0", unix.BPF_F_NO_PREALLOC)
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("error %q does not say %q and name %s", err, want, dir)
	}
}

// TestRegistryConcurrentReserve races Reserve on overlapping keys from 8
// goroutines, each with its own handle (its own map file descriptors).
func TestRegistryConcurrentReserve(t *testing.T) {
	requireRoot(t)
	dir := newPinDir(t)
	openTestRegistry(t, dir) // create the pins before the race

	const workers, nkeys = 8, 40
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("pod/%d", i)
	}
	got := make([]map[string]TenantID, workers)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := OpenRegistry(dir)
			if err != nil {
				errs <- err
				return
			}
			defer r.Close()
			got[w] = map[string]TenantID{}
			for round := range 3 {
				order := rand.Perm(nkeys)
				for _, i := range order {
					id, err := r.Reserve(keys[i], "p", testConfig(PriorityClass(round%3), uint64(w)))
					if err != nil {
						errs <- err
						return
					}
					if prev, ok := got[w][keys[i]]; ok && prev != id {
						errs <- fmt.Errorf("worker %d: key %s got %d then %d", w, keys[i], prev, id)
						return
					}
					got[w][keys[i]] = id
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkOneIDPerKey(t, openTestRegistry(t, dir), keys, got)
}

func checkOneIDPerKey(t *testing.T, r *Registry, keys []string, got []map[string]TenantID) {
	t.Helper()
	owner := map[TenantID]string{}
	for _, k := range keys {
		id, ok, err := r.LookupKey(k)
		if err != nil || !ok {
			t.Fatalf("LookupKey(%s) = %v, %v", k, ok, err)
		}
		for w, g := range got {
			if g[k] != id {
				t.Fatalf("worker %d got id %d for %s, registry says %d", w, g[k], k, id)
			}
		}
		if o, dup := owner[id]; dup {
			t.Fatalf("id %d given to %s and %s", id, o, k)
		}
		owner[id] = k
	}
	list, err := r.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(keys) {
		t.Fatalf("List has %d tenants, want %d (leaked ids?)", len(list), len(keys))
	}
	m := r.Maps()
	for name, mp := range map[string]*ebpf.Map{"tenants": m.Tenants, "keys": m.TenantKeys, "stats": m.Stats} {
		if n := countEntries(t, mp); n != len(keys) {
			t.Errorf("%s map has %d entries, want %d", name, n, len(keys))
		}
	}
}

// TestRegistryConcurrentReserveProcesses races Reserve from separate
// processes (this test binary re-executed).
func TestRegistryConcurrentReserveProcesses(t *testing.T) {
	requireRoot(t)
	dir := newPinDir(t) // the children create the pins: that races too

	const procs, nkeys = 6, 40
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("ctr/%02d", i)
	}
	cmds := make([]*strings.Builder, procs)
	var wg sync.WaitGroup
	errs := make(chan error, procs)
	for p := range procs {
		cmd := helperCmd(t, "reserve", "GPUEXT_PIN_DIR="+dir, "GPUEXT_KEYS="+strings.Join(keys, ","))
		cmds[p] = &strings.Builder{}
		cmd.Stdout = cmds[p]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cmd.Wait(); err != nil {
				errs <- fmt.Errorf("helper %d: %w", p, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := make([]map[string]TenantID, procs)
	for p, out := range cmds {
		got[p] = map[string]TenantID{}
		for _, line := range strings.Fields(out.String()) {
			var id uint32
			k, v, _ := strings.Cut(line, "=")
			if _, err := fmt.Sscan(v, &id); err != nil {
				t.Fatalf("helper %d printed %q", p, line)
			}
			got[p][k] = TenantID(id)
		}
		if len(got[p]) != nkeys {
			t.Fatalf("helper %d reserved %d keys, want %d", p, len(got[p]), nkeys)
		}
	}
	checkOneIDPerKey(t, openTestRegistry(t, dir), keys, got)
}

// TestRegistryConcurrentChurn attaches and detaches cgroups of a few shared
// tenants from 8 handles at once: a cgroup attached is always found with
// its tenant, and when every cgroup is gone no tenant is left behind.
func TestRegistryConcurrentChurn(t *testing.T) {
	requireRoot(t)
	dir := newPinDir(t)
	openTestRegistry(t, dir)

	const workers, rounds = 8, 150
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := OpenRegistry(dir)
			if err != nil {
				errs <- err
				return
			}
			defer r.Close()
			var mine []cgroup.ID
			for i := range rounds {
				key := fmt.Sprintf("pod/%d", rand.IntN(3))
				cg := cgroup.ID(100000*(w+1) + i)
				id, err := r.Upsert(key, "p", testConfig(PriorityStandard, 1), entry(cg, fmt.Sprintf("c%d", cg)))
				if err != nil {
					errs <- err
					return
				}
				tn, err := r.Lookup(cg)
				if err != nil || tn.ID != id || tn.Key != key {
					errs <- fmt.Errorf("after Upsert(%s, %d) = %d: Lookup = %+v, %v", key, cg, id, tn, err)
					return
				}
				mine = append(mine, cg)
				if rand.IntN(2) == 0 || len(mine) > 3 {
					j := rand.IntN(len(mine))
					if _, err := r.Detach(mine[j]); err != nil {
						errs <- fmt.Errorf("Detach(%d): %w", mine[j], err)
						return
					}
					mine = append(mine[:j], mine[j+1:]...)
				}
			}
			for _, cg := range mine {
				if _, err := r.Detach(cg); err != nil {
					errs <- fmt.Errorf("Detach(%d): %w", cg, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	r := openTestRegistry(t, dir)
	list, err := r.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Fatalf("tenants left after every cgroup detached: %+v", list)
	}
	m := r.Maps()
	for name, mp := range map[string]*ebpf.Map{"tenants": m.Tenants, "keys": m.TenantKeys, "stats": m.Stats, "cgroups": m.Cgroups, "meta": m.CgroupMeta} {
		if n := countEntries(t, mp); n != 0 {
			t.Errorf("%s map has %d entries left", name, n)
		}
	}
}
