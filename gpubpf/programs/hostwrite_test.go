package programs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/lib/testutil"
)

// A probe's hostWrites name u64 elements of its arrays that the interposer
// writes (what bpftime's host side writes for its device programs): our
// launchlate-shaped launch-gap loads with its launch time (lg_host[0]) and
// clock offset (lg_clock[0]), and every bad element is refused when the
// directory loads, naming the file, the element and the field.
func TestLoadDirHostWrites(t *testing.T) {
	src := testutil.BpftimeDir(t, "", "launch-gap")
	d, err := LoadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := d.Get("launch-gap")
	want := []HostWrite{{"lg_host", 0, abi.HostLaunchTime}, {"lg_clock", 0, abi.HostClockOffset}}
	if fmt.Sprint(p.HostWrites) != fmt.Sprint(want) {
		t.Fatalf("hostWrites %+v, want %+v", p.HostWrites, want)
	}
	desc, err := os.ReadFile(filepath.Join(src, "launch-gap.json"))
	if err != nil {
		t.Fatal(err)
	}
	good := `[
    {"map": "lg_host", "key": 0, "value": "launch-time"},
    {"map": "lg_clock", "key": 0, "value": "clock-offset"}
  ]`
	if !strings.Contains(string(desc), good) {
		t.Fatalf("launch-gap.json has no hostWrites %s", good)
	}
	nine := strings.Repeat(`{"map": "lg_host", "key": 0, "value": "launch-time"}, `, 8) + `{"map": "lg_clock", "key": 0, "value": "launch-time"}`
	for _, tc := range []struct{ name, hostWrites, want string }{
		{"no such map", `[{"map": "lg_nope", "key": 0, "value": "launch-time"}]`,
			`hostWrites[0].map: object has no map "lg_nope" (has: lg_calib, lg_clock, lg_hist, lg_host, lg_misc)`},
		{"a map only the host uprobe uses", `[{"map": "lg_calib", "key": 0, "value": "clock-offset"}]`,
			`hostWrites[0].map: map "lg_calib" is used by none of the probe's programs, so the module does not hold it`},
		{"key past the entries", `[{"map": "lg_host", "key": 1, "value": "launch-time"}]`,
			`hostWrites[0].key: 1 is out of map "lg_host"'s 1 entries`},
		{"unknown value", `[{"map": "lg_host", "key": 0, "value": "launch-ns"}]`,
			`hostWrites[0].value: unknown value "launch-ns" (want one of: launch-time, clock-offset)`},
		{"one element twice", `[{"map": "lg_host", "key": 0, "value": "launch-time"}, {"map": "lg_host", "key": 0, "value": "clock-offset"}]`,
			`hostWrites[1].key: map "lg_host" element 0 is hostWrites[0] already`},
		{"too many", "[" + nine + "]", `hostWrites: 9 elements, at most 8`},
		{"unknown field", `[{"map": "lg_host", "key": 0, "value": "launch-time", "offset": 40}]`, `"offset"`},
		{"negative key", `[{"map": "lg_host", "key": -1, "value": "launch-time"}]`, `hostWrites.key: want uint32`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			copyFile(t, filepath.Join(src, "launch-gap.bpf.o"), dir, "launch-gap.bpf.o")
			writeFile(t, dir, "launch-gap.json", strings.Replace(string(desc), good, tc.hostWrites, 1))
			_, err := LoadDir(dir)
			if err == nil || !errors.Is(err, ErrBadProbeDir) {
				t.Fatalf("err %v, want a bad probe directory entry", err)
			}
			if want := filepath.Join(dir, "launch-gap.json") + ": "; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %q\nwant %q in it, after the file", err, tc.want)
			}
		})
	}
}

// The interposer writes a u64 element of an array: a hash, a per-thread
// array (bpftime's GPU hash and per-thread host array) are refused, naming
// the map and its bpftime type.
func TestLoadDirHostWriteMapTypes(t *testing.T) {
	obj := filepath.Join(t.TempDir(), "bt-types.bpf.o")
	testutil.BuildBpftime(t, filepath.Join("testdata", "dir", "bt_types.bpf.c"), obj)
	for _, tc := range []struct{ name, hostWrites, want string }{
		{"hash", `[{"map": "bt_hash", "key": 0, "value": "launch-time"}]`,
			`hostWrites[0].map: map "bt_hash" is a hash (type 1501) map of 8-byte values, the interposer writes a u64 element of an array`},
		{"per-thread", `[{"map": "bt_rows", "key": 0, "value": "clock-offset"}]`,
			`hostWrites[0].map: map "bt_rows" is a per-thread (type 1512) map of 8-byte values, the interposer writes a u64 element of an array`},
		{"bpftime's host array", `[{"map": "bt_host", "key": 0, "value": "launch-time"}]`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			copyFile(t, obj, dir, "bt-types.bpf.o")
			writeFile(t, dir, "bt-types.json", `{"name": "bt-types", "description": "bpftime's map types", "programs": ["bt_exit"],
  "views": [{"map": "bt_array", "kind": "counters", "fields": ["exits"]}], "hostWrites": `+tc.hostWrites+`}`)
			_, err := LoadDir(dir)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("err %v, want a GPU host array accepted", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrBadCatalog) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v\nwant %q", err, tc.want)
			}
		})
	}
}

// Describe applies bpftime's launchlate rule to our launchlate-shaped
// object: lg_host[0], which the device program looks up at key 0 and only
// the host uprobe updates there after bpf_ktime_get_ns, is a launch-time
// hostWrite; lg_clock[0] (written by no program: the loader's) is not
// inferred, and lg_calib, which only the uprobe uses, gets no view (the
// module does not hold it: bpftime's launchlate's clock_offset was
// described with one, and reported as a map not copied out). Without the
// uprobe's clock read, or with the device writing lg_host, nothing is
// inferred.
func TestDescribeHostWrites(t *testing.T) {
	src := testutil.BpftimeDir(t, "", "launch-gap")
	obj, err := os.ReadFile(filepath.Join(src, "launch-gap.bpf.o"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Describe("launch-gap", "launch-gap.bpf.o", obj)
	if err != nil {
		t.Fatal(err)
	}
	var views []string
	for _, v := range p.Views {
		views = append(views, v.Map+":"+string(v.Kind))
	}
	if got := strings.Join(views, ","); got != "lg_clock:counters,lg_hist:counters,lg_host:counters,lg_misc:counters" {
		t.Errorf("views %s", got)
	}
	if got := fmt.Sprint(p.HostWrites); got != "[{lg_host 0 launch-time}]" {
		t.Errorf("hostWrites %s, want lg_host[0] launch-time", got)
	}
	dir := t.TempDir()
	copyFile(t, filepath.Join(src, "launch-gap.bpf.o"), dir, "launch-gap.bpf.o")
	writeFile(t, dir, "launch-gap.json", string(DescriptorJSON(p)))
	if _, err := LoadDir(dir); err != nil {
		t.Errorf("the described entry does not load: %v", err)
	}

	text, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), "gpubpf", "compile", "testdata", "bpftime", "launch_gap.bpf.c"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, from, to string }{
		{"no clock read in the uprobe", "u64 now = bpf_ktime_get_ns();", "u64 now = 1;"},
		{"the device writes lg_host", "*start = now - *off;", "*launched = now;"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(string(text), tc.from) {
				t.Fatalf("launch_gap.bpf.c has no %q", tc.from)
			}
			s := filepath.Join(t.TempDir(), "launch_gap.bpf.c")
			if err := os.WriteFile(s, []byte(strings.Replace(string(text), tc.from, tc.to, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			o := filepath.Join(t.TempDir(), "launch-gap.bpf.o")
			testutil.BuildBpftime(t, s, o)
			obj, err := os.ReadFile(o)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Describe("launch-gap", "launch-gap.bpf.o", obj)
			if err != nil || len(p.HostWrites) != 0 {
				t.Errorf("hostWrites %v (err %v), want none", p.HostWrites, err)
			}
		})
	}
}
