//go:build kernellab

package guest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/bpf/kernelpolicy"
)

// attachedByName maps the loader's Attached listing by catalog name.
func attachedByName(t *testing.T, l *kernelpolicy.Loader) map[string]kernelpolicy.Status {
	t.Helper()
	list, err := l.Attached()
	if err != nil {
		t.Fatalf("attached: %v", err)
	}
	m := map[string]kernelpolicy.Status{}
	for _, s := range list {
		m[s.Name] = s
	}
	return m
}

// TestPinnedPoliciesSurviveRestart: two policies attached through the loader
// with pinned links stay attached when every Go handle is closed (an agent
// restart); a new loader finds them from the pins and the core's listing,
// evictions still follow them, and Detach returns the stock order.
func TestPinnedPoliciesSurviveRestart(t *testing.T) {
	requireLab(t)
	reg, err := bpf.OpenRegistry("")
	if err != nil {
		t.Fatalf("open registry: %v", err)
	}
	t.Cleanup(func() { reg.Close() })
	if err := kernelpolicy.HandRegistryToCore(reg); err != nil {
		t.Fatalf("hand registry to core: %v", err)
	}
	fifoCg, _ := tenantCgroup(t, reg, "pin-fifo", bpf.EvictFIFO)
	lruCg, _ := tenantCgroup(t, reg, "pin-lru", bpf.EvictLRU)

	pinDir := "/sys/fs/bpf/gpuext-loader-test"
	t.Cleanup(func() { os.RemoveAll(pinDir) })
	l := kernelpolicy.NewLoader(pinDir)
	fifo, err := l.Attach("fifo")
	if err != nil {
		t.Fatalf("attach fifo: %v", err)
	}
	lru, err := l.Attach("lru")
	if err != nil {
		t.Fatalf("attach lru: %v", err)
	}
	if !fifo.Pinned() || !lru.Pinned() {
		t.Fatal("loader handles are not pinned")
	}
	for _, n := range []string{"fifo", "lru"} {
		if _, err := os.Stat(filepath.Join(pinDir, "links", n)); err != nil {
			t.Errorf("no pin for %s: %v", n, err)
		}
	}
	if _, err := l.Attach("fifo"); err == nil || !strings.Contains(err.Error(), "already attached") {
		t.Errorf("second attach of fifo: %v, want already attached", err)
	}

	a := gpuCtx(t, "ctx-pin-fifo", fifoCg)
	b := gpuCtx(t, "ctx-pin-lru", lruCg)
	workload(t, a)
	workload(t, b)
	expect(t, "fifo tenant", evict(t, a), "fifo", fifoOrder)
	expect(t, "lru tenant", evict(t, b), "lru", lruOrder)

	// Agent restart: every Go handle of the policies goes away.
	if err := fifo.Close(); err != nil {
		t.Fatal(err)
	}
	if err := lru.Close(); err != nil {
		t.Fatal(err)
	}
	expect(t, "fifo tenant after the agent closed its handles", evict(t, a), "fifo", fifoOrder)
	expect(t, "lru tenant after the agent closed its handles", evict(t, b), "lru", lruOrder)

	l2 := kernelpolicy.NewLoader(pinDir)
	got := attachedByName(t, l2)
	for _, want := range []struct {
		name, ops string
	}{{"fifo", "fifo"}, {"lru", "lru"}} {
		s, ok := got[want.name]
		if !ok || !s.Pinned || !s.Listed || s.Ops != want.ops || s.Kind != kernelpolicy.KindMemory {
			t.Errorf("after restart, %s: %+v (present %v), want pinned, listed by the core as %s memory ops", want.name, s, ok, want.ops)
		}
	}
	if s := got["fifo"]; s.Calls < 2 || s.Handled < 2 {
		t.Errorf("fifo counters after two evictions: %+v", s.OpsStats)
	}
	re, err := l2.Open("fifo")
	if err != nil {
		t.Fatalf("re-open fifo from its pin: %v", err)
	}
	re.Close()
	expect(t, "fifo tenant after re-open and close", evict(t, a), "fifo", fifoOrder)

	// Detach: unpinned, gone from the core, stock order back.
	if err := l2.Detach("fifo"); err != nil {
		t.Fatalf("detach fifo: %v", err)
	}
	if _, err := os.Stat(filepath.Join(pinDir, "links", "fifo")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("fifo pin after detach: %v", err)
	}
	expect(t, "fifo tenant after detach", evict(t, a), "stock", lruOrder)
	expect(t, "lru tenant after fifo detach", evict(t, b), "lru", lruOrder)
	if err := l2.Detach("lru"); err != nil {
		t.Fatalf("detach lru: %v", err)
	}
	expect(t, "lru tenant after detach", evict(t, b), "stock", lruOrder)
	if list, err := l2.Attached(); err != nil || len(list) != 0 {
		t.Errorf("attached after detaching all: %+v, %v", list, err)
	}
	if ops, _ := os.ReadFile(gpuextDir + "/ops"); strings.TrimSpace(string(ops)) != "" {
		t.Errorf("core still lists ops after detach: %q", ops)
	}
	if err := l2.Detach("fifo"); err == nil || !strings.Contains(err.Error(), "not attached") {
		t.Errorf("detach of a detached policy: %v, want not attached", err)
	}
}

// TestLoaderSchedPolicyPinned: a sched policy attaches pinned, shows its
// classes in the listing, and detaches.
func TestLoaderSchedPolicyPinned(t *testing.T) {
	requireLab(t)
	pinDir := "/sys/fs/bpf/gpuext-loader-sched"
	t.Cleanup(func() { os.RemoveAll(pinDir) })
	l := kernelpolicy.NewLoader(pinDir)
	a, err := l.Attach("sched_priority")
	if err != nil {
		t.Fatalf("attach sched_priority: %v", err)
	}
	a.Close()
	s := attachedByName(t, l)["sched_priority"]
	if !s.Pinned || !s.Listed || s.Kind != kernelpolicy.KindSched || s.Classes == 0 {
		t.Errorf("sched_priority after closing its handle: %+v", s)
	}
	if err := l.Detach("sched_priority"); err != nil {
		t.Fatalf("detach: %v", err)
	}
	if ops, _ := os.ReadFile(gpuextDir + "/sched_ops"); strings.TrimSpace(string(ops)) != "" {
		t.Errorf("core still lists sched ops after detach: %q", ops)
	}
}

// TestCoreABIAndMissingCore: the real core reports this build's ABI version
// in a read-only abi_version; a missing core is ErrNoCore.
func TestCoreABIAndMissingCore(t *testing.T) {
	requireLab(t)
	if err := kernelpolicy.DefaultCore().Check(); err != nil {
		t.Fatalf("core check: %v", err)
	}
	data, err := os.ReadFile(gpuextDir + "/abi_version")
	if err != nil || strings.TrimSpace(string(data)) != strconv.FormatUint(uint64(bpf.ABIVersion), 10) {
		t.Errorf("abi_version %q (%v), want %d", data, err, bpf.ABIVersion)
	}
	if err := os.WriteFile(gpuextDir+"/abi_version", []byte("7"), 0); err == nil {
		t.Errorf("abi_version is writable")
	}
	l := &kernelpolicy.Loader{PinDir: "/sys/fs/bpf/gpuext-nocore", Core: kernelpolicy.Core{Dir: "/sys/kernel/debug/no-such-core"}}
	if _, err := l.Attach("fifo"); !errors.Is(err, kernelpolicy.ErrNoCore) || !strings.Contains(err.Error(), "modprobe gpuext") {
		t.Errorf("attach without a core: %v, want ErrNoCore saying modprobe gpuext", err)
	}
}
