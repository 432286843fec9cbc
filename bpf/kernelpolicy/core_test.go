package kernelpolicy

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/bpf"
)

// fakeCore writes a fake gpuext debugfs directory.
func fakeCore(t *testing.T, files map[string]string) Core {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "gpuext")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Core{Dir: dir}
}

func abi() string { return strconv.FormatUint(uint64(bpf.ABIVersion), 10) + "\n" }

// A missing core is ErrNoCore, with the fix in the message, for every entry point.
func TestMissingCoreIsErrNoCore(t *testing.T) {
	core := Core{Dir: filepath.Join(t.TempDir(), "gpuext")}
	l := &Loader{PinDir: t.TempDir(), Core: core}
	_, attachErr := l.Attach("fifo")
	_, listErr := l.Attached()
	_, statsErr := l.Stats()
	for what, err := range map[string]error{
		"Check": core.Check(), "Attach": attachErr, "Attached": listErr, "Stats": statsErr,
		"HandRegistry": core.HandRegistry(nil),
	} {
		if !errors.Is(err, ErrNoCore) || !strings.Contains(err.Error(), "modprobe gpuext") {
			t.Errorf("%s without a core: %v, want ErrNoCore saying modprobe gpuext", what, err)
		}
	}
}

// A core of another ABI version is ErrABIMismatch naming both versions; a
// core without abi_version (older) is a mismatch too.
func TestCoreABIMismatch(t *testing.T) {
	other := bpf.ABIVersion + 41
	core := fakeCore(t, map[string]string{"ops": "", "abi_version": strconv.FormatUint(uint64(other), 10) + "\n"})
	err := core.Check()
	if !errors.Is(err, ErrABIMismatch) {
		t.Fatalf("Check: %v, want ErrABIMismatch", err)
	}
	for _, v := range []uint32{other, bpf.ABIVersion} {
		if !strings.Contains(err.Error(), "ABI version "+strconv.FormatUint(uint64(v), 10)) {
			t.Errorf("error %q does not name ABI version %d", err, v)
		}
	}
	l := &Loader{PinDir: t.TempDir(), Core: core}
	if _, err := l.Attach("lru"); !errors.Is(err, ErrABIMismatch) {
		t.Errorf("Attach on a mismatched core: %v, want ErrABIMismatch", err)
	}
	old := fakeCore(t, map[string]string{"ops": ""})
	if err := old.Check(); !errors.Is(err, ErrABIMismatch) {
		t.Errorf("Check of a core without abi_version: %v, want ErrABIMismatch", err)
	}
	if err := fakeCore(t, map[string]string{"ops": "", "abi_version": abi()}).Check(); err != nil {
		t.Errorf("Check of a matching core: %v", err)
	}
}

// Stats parses both listings; Attached joins pins with them.
func TestStatsAndAttachedFromFakeCore(t *testing.T) {
	core := fakeCore(t, map[string]string{
		"abi_version": abi(),
		"ops":         "fifo calls 7 handled 5 errors 1 refused 2\nmystery calls 1 handled 0 errors 0 refused 0\n",
		"sched_ops":   "sched_priority classes 0x5 calls 3 handled 3 errors 0 refused 0 denied 0\n",
	})
	st, err := core.Stats()
	if err != nil {
		t.Fatal(err)
	}
	want := []OpsStats{
		{Ops: "fifo", Kind: KindMemory, Calls: 7, Handled: 5, Errors: 1, Refused: 2},
		{Ops: "mystery", Kind: KindMemory, Calls: 1},
		{Ops: "sched_priority", Kind: KindSched, Classes: 5, Calls: 3, Handled: 3},
	}
	if len(st) != len(want) {
		t.Fatalf("Stats = %+v, want %+v", st, want)
	}
	for i := range want {
		if st[i] != want[i] {
			t.Errorf("Stats[%d] = %+v, want %+v", i, st[i], want[i])
		}
	}
	pin := t.TempDir()
	l := &Loader{PinDir: pin, Core: core}
	os.MkdirAll(l.LinksDir(), 0o755)
	for _, n := range []string{"fifo", "sched_priority", "tenant-quota"} {
		os.WriteFile(filepath.Join(l.LinksDir(), n), nil, 0o644)
	}
	list, err := l.Attached()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Status{}
	for _, s := range list {
		got[s.Name+"/"+s.Ops] = s
	}
	if s := got["fifo/fifo"]; !s.Pinned || !s.Listed || s.Calls != 7 || s.Kind != KindMemory {
		t.Errorf("fifo: %+v", s)
	}
	if s := got["sched_priority/sched_priority"]; !s.Pinned || !s.Listed || s.Classes != 5 || s.Kind != KindSched {
		t.Errorf("sched_priority: %+v", s)
	}
	if s := got["tenant-quota/tenant_quota"]; !s.Pinned || s.Listed {
		t.Errorf("tenant-quota (pinned, not listed): %+v", s)
	}
	if s := got["/mystery"]; s.Pinned || !s.Listed {
		t.Errorf("mystery (listed, no pin): %+v", s)
	}
	if len(list) != 4 {
		t.Errorf("Attached = %+v, want 4 entries", list)
	}
}

// The ops name the catalog records is the one in the policy's struct_ops
// map (what the core lists), and the kind matches the ops type.
func TestCatalogOpsNames(t *testing.T) {
	for name, e := range catalog {
		spec, err := e.load()
		if err != nil {
			t.Fatal(err)
		}
		ms := spec.Maps[e.opsMap]
		if ms == nil || len(ms.Contents) == 0 {
			t.Errorf("%s: no contents in %s", name, e.opsMap)
			continue
		}
		val, _ := ms.Contents[0].Value.([]byte)
		if !bytes.Contains(val, append([]byte(e.ops), 0)) {
			t.Errorf("%s: struct_ops value does not hold the name %q", name, e.ops)
		}
		want := map[Kind]string{KindMemory: "gpuext_mem_ops", KindSched: "gpuext_sched_ops"}[e.kind]
		if ms.Value == nil || ms.Value.TypeName() != want {
			t.Errorf("%s: kind %s, but its map is of type %v", name, e.kind, ms.Value)
		}
	}
}
