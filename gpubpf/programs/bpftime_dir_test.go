package programs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/gpuext/gpuext/lib/testutil"
)

// bpftimeProbes are the bpftime-style test programs with descriptors.
var bpftimeProbes = []string{"thread-hist", "ret-snoop", "launch-bins", "call-counter"}

// Our own programs in bpftime's style (kprobe/KERNEL sections, its map
// types) load from a probe directory, their views checked against the
// maps as the loader makes them (a per-thread array, a GPU array, a GPU
// ring buffer).
func TestLoadDirBpftimePrograms(t *testing.T) {
	d, err := LoadDir(testutil.BpftimeDir(t, "", bpftimeProbes...))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(d.Names(), ","); got != "call-counter,launch-bins,ret-snoop,thread-hist" {
		t.Fatalf("names %s", got)
	}
	if _, err := Builtin().With(d); err != nil {
		t.Fatal(err)
	}
	p, _ := d.Get("thread-hist")
	if p.Views[0].Kind != ViewPerThread || p.Object != "thread-hist.bpf.o" {
		t.Errorf("thread-hist: %+v", p)
	}
}

// The rest of bpftime's GPU map types get views as the loader maps them
// (GPU hash -> hash, kernel-shared and host arrays -> array, per-thread
// host array -> per-thread); a view that does not fit the mapped type is
// refused naming the map, its bpftime type and what the view needs.
func TestLoadDirBpftimeMapTypes(t *testing.T) {
	obj := filepath.Join(t.TempDir(), "bt-types.bpf.o")
	testutil.BuildBpftime(t, filepath.Join("testdata", "dir", "bt_types.bpf.c"), obj)
	const views = `[
    {"map": "bt_hash", "kind": "hash", "key": [{"name": "block", "type": "u64"}], "value": [{"name": "exits", "type": "u64"}]},
    {"map": "bt_shared", "kind": "counters", "fields": ["exits"]},
    {"map": "bt_rows", "kind": "per-thread", "fields": ["exits", "unused"]},
    {"map": "bt_host", "kind": "counters", "fields": ["exits"]},
    {"map": "bt_array", "kind": "counters", "fields": ["exits"]}]`
	desc := func(views string) string {
		return `{"name": "bt-types", "description": "bpftime's map types", "programs": ["bt_exit"], "views": ` + views + `}`
	}
	dir := t.TempDir()
	copyFile(t, obj, dir, "bt-types.bpf.o")
	writeFile(t, dir, "bt-types.json", desc(views))
	if _, err := LoadDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, views, want string }{
		{"hash view of a GPU array", `[{"map": "bt_array", "kind": "hash", "key": [{"name": "k", "type": "u32"}], "value": [{"name": "v", "type": "u64"}]}]`,
			`views[0].map: map "bt_array" is a array (type 1503) map, a hash view needs a hash`},
		{"per-thread view of a GPU hash", `[{"map": "bt_hash", "kind": "per-thread", "fields": ["n"]}]`,
			`views[0].map: map "bt_hash" is a hash (type 1501) map, a per-thread view needs a per-thread array`},
		{"records view of a per-thread map", `[{"map": "bt_rows", "kind": "records", "record": [{"name": "v", "type": "u64"}]}]`,
			`views[0].map: map "bt_rows" is a per-thread (type 1512) map, a records view needs a ring buffer`},
		{"per-thread view without fields", `[{"map": "bt_rows", "kind": "per-thread"}]`,
			`views[0].fields: a per-thread view names its entries`},
		{"per-thread view past the entries", `[{"map": "bt_rows", "kind": "per-thread", "fields": ["a", "b", "c"]}]`,
			`views[0].fields: 3 names for a map of 2 entries`},
		{"per-thread view with a mean", `[{"map": "bt_rows", "kind": "per-thread", "fields": ["a", "b"], "means": [{"name": "m", "sum": "a", "count": "b"}]}]`,
			`views[0].means: a per-thread view has fields only`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			copyFile(t, obj, dir, "bt-types.bpf.o")
			writeFile(t, dir, "bt-types.json", desc(tc.views))
			_, err := LoadDir(dir)
			if err == nil || !errors.Is(err, ErrBadProbeDir) || !errors.Is(err, ErrBadCatalog) {
				t.Fatalf("err %v, want a bad probe directory entry", err)
			}
			if want := filepath.Join(dir, "bt-types.json") + ": " + tc.want; !strings.Contains(err.Error(), want) {
				t.Errorf("err %q\nwant %q", err, want)
			}
		})
	}
}

// A per-thread map's rows (map_extra) past the device's bound is refused
// when the directory loads, naming the map.
func TestLoadDirPerThreadRowsBound(t *testing.T) {
	src := filepath.Join(t.TempDir(), "bt_types.bpf.c")
	b, err := os.ReadFile(filepath.Join("testdata", "dir", "bt_types.bpf.c"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, []byte(strings.Replace(string(b), "map_extra, 4096", "map_extra, 16777217", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	testutil.BuildBpftime(t, src, filepath.Join(dir, "bt-types.bpf.o"))
	writeFile(t, dir, "bt-types.json", `{"name": "bt-types", "description": "rows", "programs": ["bt_exit"], "views": [{"map": "bt_rows", "kind": "per-thread", "fields": ["a"]}]}`)
	_, err = LoadDir(dir)
	if err == nil || !errors.Is(err, ErrBadProbeDir) || !strings.Contains(err.Error(), `map "bt_rows"`) || !strings.Contains(err.Error(), "16777217") {
		t.Fatalf("err %v, want the per-thread map's rows refused", err)
	}
}

// Describe gives each bpftime-style object a descriptor LoadDir accepts:
// its device programs and a view per map (per-thread, counters, records,
// hash as the loader maps them).
func TestDescribeBpftimeObjects(t *testing.T) {
	src := testutil.BpftimeDir(t, "", bpftimeProbes...)
	want := map[string]string{"thread-hist": "th_count:per-thread", "ret-snoop": "rs_events:records",
		"launch-bins": "lb_hist:counters", "call-counter": "cc_pid:counters,cc_start:hash,cc_totals:counters"}
	for _, name := range bpftimeProbes {
		obj, err := os.ReadFile(filepath.Join(src, name+".bpf.o"))
		if err != nil {
			t.Fatal(err)
		}
		p, err := Describe(name, name+".bpf.o", obj)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var views []string
		for _, v := range p.Views {
			views = append(views, v.Map+":"+string(v.Kind))
		}
		if got := strings.Join(views, ","); got != want[name] {
			t.Errorf("%s: views %s, want %s", name, got, want[name])
		}
		dir := t.TempDir()
		copyFile(t, filepath.Join(src, name+".bpf.o"), dir, name+".bpf.o")
		writeFile(t, dir, name+".json", string(DescriptorJSON(p)))
		if _, err := LoadDir(dir); err != nil {
			t.Errorf("%s: the described entry does not load: %v", name, err)
		}
	}
}

// bpftime's ring buffers give the largest record as value_size (1 KiB in
// kernelretsnoop), past what a view's field may be: the description still
// has a records view (every record counted), its record at the bound.
func TestDescribeLargeRingRecord(t *testing.T) {
	v, ok := describeMap(&ebpf.MapSpec{Name: "rb", Type: ebpf.MapType(1527), KeySize: 4, ValueSize: 1024, MaxEntries: 16})
	if !ok || v.Kind != ViewRecords || LayoutSize(v.Record) != MaxFieldBytes {
		t.Fatalf("view %+v (ok %v), want records of %d bytes", v, ok, MaxFieldBytes)
	}
}
