package programs

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/cilium/ebpf"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/programs/catalog"
	"github.com/gpuext/gpuext/lib/strictjson"
)

// TestBuiltinCatalog is the smoke test of the embedded probe catalog: every
// entry decodes strictly, names programs at attach points and maps its views
// can render.
func TestBuiltinCatalog(t *testing.T) {
	files, err := fs.Glob(builtinFS, "catalog/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no catalog files: %v", err)
	}
	for _, f := range files {
		data, _ := fs.ReadFile(builtinFS, f)
		var p Probe
		if err := strictjson.Decode(data, &p); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	c := Builtin()
	if got, want := strings.Join(c.Names(), ","), "launch-count,launch-latency,launch-stats,sm-histogram"; got != want {
		t.Fatalf("Names() = %s, want %s", got, want)
	}
	// the names the policy model checks without loading the objects
	if got, want := strings.Join(catalog.Names(), ","), strings.Join(c.Names(), ","); got != want {
		t.Fatalf("catalog.Names() = %s, the loaded catalog has %s", got, want)
	}
	for _, name := range c.Names() {
		p, _ := c.Get(name)
		spec, err := c.Spec(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, prog := range p.Programs {
			if _, ok := abi.AttachOfSection(spec.Programs[prog].SectionName); !ok {
				t.Errorf("%s: program %s is not at an attach point", name, prog)
			}
		}
	}
	ll, _ := c.Get("launch-latency")
	if !ll.LaunchTime {
		t.Error("launch-latency must ask for the launch time")
	}
	ls, _ := c.Get("launch-stats")
	if ls.LaunchTime {
		t.Error("launch-stats does not need the launch time")
	}
}

// The probes' maps are what the device gets: each must have a device layout.
func TestBuiltinMapsHaveDeviceLayouts(t *testing.T) {
	types := map[ebpf.MapType]abi.MapType{ebpf.Array: abi.MapArray, ebpf.Hash: abi.MapHash,
		ebpf.PerCPUArray: abi.MapPerWarp, ebpf.RingBuf: abi.MapRingbuf}
	c := Builtin()
	for _, name := range c.Names() {
		spec, _ := c.Spec(name)
		for mname, m := range spec.Maps {
			if strings.HasPrefix(mname, ".") {
				t.Errorf("%s: global data section %s (probes must not use globals: merged modules would clash)", name, mname)
				continue
			}
			dt, ok := types[m.Type]
			if !ok {
				t.Errorf("%s: map %s type %s has no device type", name, mname, m.Type)
				continue
			}
			if _, err := abi.Layout(dt, m.KeySize, m.ValueSize, m.MaxEntries); err != nil {
				t.Errorf("%s: map %s: %v", name, mname, err)
			}
		}
	}
}

func TestCheckNamesUnknownProbe(t *testing.T) {
	err := Builtin().Check([]string{"launch-stats", "launch-counts"})
	if !errors.Is(err, ErrUnknownProbe) || !strings.Contains(err.Error(), `"launch-counts"`) ||
		!strings.Contains(err.Error(), "launch-stats") {
		t.Fatalf("err = %v, want unknown probe \"launch-counts\" with the known names", err)
	}
	if err := Builtin().Check([]string{"sm-histogram"}); err != nil {
		t.Fatal(err)
	}
}

func TestLoadRejectsBadEntries(t *testing.T) {
	good, _ := fs.ReadFile(builtinFS, "catalog/launch-stats.json")
	obj, _ := fs.ReadFile(builtinFS, "launchstats_bpfel.o")
	for _, tc := range []struct {
		name, json string
		want       []string
	}{
		{"unknown field", strings.Replace(string(good), `"object"`, `"objekt": 1, "object"`, 1), []string{"objekt"}},
		{"name mismatch", strings.Replace(string(good), `"name": "launch-stats"`, `"name": "other"`, 1), []string{"name", "other"}},
		{"missing program", strings.Replace(string(good), `"launch_stats_exit"`, `"nope"`, 1), []string{"programs[1]", "nope", "launch_stats_exit"}},
		{"missing object", strings.Replace(string(good), `"launchstats_bpfel.o"`, `"gone.o"`, 1), []string{"object", "gone.o"}},
		{"unknown view map", strings.Replace(string(good), `"ls_counters"`, `"ls_countres"`, 1), []string{"views[0].map", "ls_countres"}},
		{"unknown view kind", strings.Replace(string(good), `"counters"`, `"pie"`, 1), []string{"views[0].kind", "pie"}},
		{"more names than entries", strings.Replace(string(good), `"blockExits"]`, `"blockExits", "extra"]`, 1), []string{"views[0].fields", "5 names"}},
		{"in flight counted by the count itself", strings.Replace(string(good), `"inFlight": "blocks"`, `"inFlight": "blockExits"`, 1), []string{"views[0].means[0].inFlight", "blockExits"}},
		{"mean of an unknown field", strings.Replace(string(good), `"sum": "blockNs"`, `"sum": "blockMs"`, 1), []string{"views[0].means[0].sum", "blockMs"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := fstest.MapFS{
				"c/launch-stats.json": {Data: []byte(tc.json)},
				"launchstats_bpfel.o": {Data: obj},
			}
			_, err := Load(fsys, "c", ".")
			if err == nil {
				t.Fatal("loaded")
			}
			if !errors.Is(err, ErrBadCatalog) {
				t.Errorf("err %v does not match ErrBadCatalog", err)
			}
			msg := err.Error()
			for _, w := range append([]string{"c/launch-stats.json"}, tc.want...) {
				if !strings.Contains(msg, w) {
					t.Errorf("err %q does not name %q", msg, w)
				}
			}
		})
	}
}
