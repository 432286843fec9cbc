package policies

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

// TestBuiltinCatalog is the smoke test of the embedded catalog: every file
// decodes strictly and validates, and BuiltinCatalog does not panic.
func TestBuiltinCatalog(t *testing.T) {
	files, err := fs.Glob(BuiltinFiles(), "*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no embedded catalog files: %v", err)
	}
	for _, f := range files {
		data, err := fs.ReadFile(BuiltinFiles(), f)
		if err != nil {
			t.Fatal(err)
		}
		var p Policy
		if err := decodeStrict(data, &p); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	c := BuiltinCatalog()
	want := []string{"batch", "default", "latency-critical", "quota", "vector-search"}
	if got := strings.Join(c.Names(), ","); got != strings.Join(want, ",") {
		t.Errorf("Names() = %s, want %v", got, want)
	}
	if len(c.List()) != len(files) {
		t.Errorf("List() has %d policies, %d files", len(c.List()), len(files))
	}
	for _, p := range c.List() {
		if err := p.Validate(); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
		if !strings.HasPrefix(p.Source, "builtin:catalog/") || p.Summary() == "" {
			t.Errorf("%s: source %q summary %q", p.Name, p.Source, p.Summary())
		}
	}
	if d := c.Default(); d.Name != "default" || d.Priority.Class != Standard {
		t.Errorf("Default() = %+v", d)
	}
	lc, _ := c.Get("latency-critical")
	if got, want := lc.Summary(), "class=latency-critical quota=unlimited evict=priority-weighted(weight=8) prefetch=tree-threshold(threshold=25) timeslice=1ms interleave=8 active-window=6ms latency-target=1.5x-of-alone"; got != want {
		t.Errorf("Summary() = %q, want %q", got, want)
	}
}

func TestCatalogIsImmutable(t *testing.T) {
	c := BuiltinCatalog()
	p, _ := c.Get("default")
	p.Memory.Prefetch.Params["threshold"] = 99
	p.Probes = append(p.Probes, "x")
	again, _ := c.Get("default")
	if again.Memory.Prefetch.Params["threshold"] != 51 || len(again.Probes) != 0 {
		t.Fatalf("Get returned shared state: %+v", again)
	}
}

func TestLoadCatalogErrors(t *testing.T) {
	const good = `{"name":"batch","memory":{"eviction":{"name":"fifo"},"prefetch":{"name":"none"}},"priority":{"class":"best-effort"}}`
	for _, tc := range []struct {
		name, file, body string
		wantParts        []string
	}{
		{"unknown nested field", "batch.json", `{"name":"batch","memory":{"evicton":{"name":"fifo"},"prefetch":{"name":"none"}},"priority":{"class":"best-effort"}}`,
			[]string{"catalog/batch.json", `unknown field "evicton"`, "memory", `did you mean "eviction"`}},
		{"unknown top field", "batch.json", `{"name":"batch","prority":{}}`, []string{"catalog/batch.json", `unknown field "prority"`}},
		{"field in other case", "batch.json", `{"Name":"batch"}`, []string{`unknown field "Name"`, `did you mean "name"`}},
		{"duplicate field", "batch.json", `{"name":"batch","name":"other"}`, []string{`field "name" given twice`}},
		{"trailing data", "batch.json", good + `{}`, []string{"catalog/batch.json", "trailing data"}},
		{"name mismatch", "batch.json", strings.Replace(good, `"batch"`, `"batch2"`, 1), []string{"catalog/batch.json", "name", "file name"}},
		{"unknown eviction", "batch.json", strings.Replace(good, "fifo", "lruu", 1), []string{`memory.eviction.name: unknown eviction policy "lruu"`}},
		{"bad param", "batch.json", strings.Replace(good, `{"name":"none"}`, `{"name":"tree-threshold","params":{"threshold":101}}`, 1), []string{"memory.prefetch.params.threshold", "out of range"}},
		{"unknown param", "batch.json", strings.Replace(good, `{"name":"fifo"}`, `{"name":"lfu","params":{"weight":3}}`, 1), []string{"memory.eviction.params.weight", `no parameter "weight"`}},
		{"bad class", "batch.json", strings.Replace(good, "best-effort", "gold", 1), []string{`priority.class: unknown priority class "gold"`}},
		{"bad quota action", "batch.json", strings.Replace(good, `{"name":"none"}}`, `{"name":"none"},"quota":"4GiB","quotaAction":"terminate"}`, 1), []string{"memory.quotaAction", `"terminate"`, `"kill" or "report"`}},
		{"bad quota", "batch.json", strings.Replace(good, `{"name":"none"}}`, `{"name":"none"},"quota":"12XB"}`, 1), []string{"memory.quota", `unknown unit "XB"`}},
		{"bad probe", "batch.json", strings.Replace(good, `"priority"`, `"probes":["Bad"],"priority"`, 1), []string{"probes[0]"}},
		{"unknown probe", "batch.json", strings.Replace(good, `"priority"`, `"probes":["launch-stats","kernel-timer"],"priority"`, 1), []string{"probes[1]", `unknown probe "kernel-timer"`}},
		{"wrong type", "batch.json", strings.Replace(good, `"best-effort"}`, `"best-effort","interleave":"8"}`, 1), []string{"priority.interleave"}},
		{"sm share over 100", "batch.json", strings.Replace(good, `"best-effort"}`, `"best-effort","smPercent":140}`, 1), []string{"priority.smPercent", "140 is above 100"}},
		{"latency target on best-effort", "batch.json", strings.Replace(good, `"best-effort"}`, `"best-effort","latencyTarget":"1.5x"}`, 1), []string{"priority.latencyTarget", "only a latency-critical policy"}},
		{"latency target not a ratio or duration", "batch.json", strings.Replace(good, `"best-effort"}`, `"latency-critical","latencyTarget":"fast"}`, 1), []string{"priority.latencyTarget", `"fast"`, "ratio such as"}},
		{"latency target ratio too small", "batch.json", strings.Replace(good, `"best-effort"}`, `"latency-critical","latencyTarget":"1x"}`, 1), []string{"priority.latencyTarget", `"1x"`, "out of range"}},
		{"latency target too short", "batch.json", strings.Replace(good, `"best-effort"}`, `"latency-critical","latencyTarget":"2us"}`, 1), []string{"priority.latencyTarget", `"2us"`, "out of range"}},
		{"tenant-quota without quota", "batch.json", strings.Replace(good, "fifo", "tenant-quota", 1), []string{"tenant-quota", "needs a quota"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := fstest.MapFS{"catalog/" + tc.file: {Data: []byte(tc.body)}, "catalog/README.md": {Data: []byte("ignored")}}
			_, err := LoadCatalog(fsys, "catalog")
			if err == nil {
				t.Fatal("no error")
			}
			t.Log(err)
			for _, part := range tc.wantParts {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error %q does not contain %q", err, part)
				}
			}
		})
	}
}

func TestLoadCatalogDirMerge(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("batch.json", `{"name":"batch","memory":{"eviction":{"name":"lru"},"prefetch":{"name":"none"},"quota":"4GiB"},"priority":{"class":"best-effort"}}`)
	write("gold.json", `{"name":"gold","memory":{"eviction":{"name":"mru"},"prefetch":{"name":"stride"}},"priority":{"class":"latency-critical","timesliceUs":500}}`)
	user, err := LoadCatalogDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	merged, err := BuiltinCatalog().Merge(user)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(merged.Names(), ","); got != "batch,default,gold,latency-critical,quota,vector-search" {
		t.Errorf("Names() = %s", got)
	}
	b, _ := merged.Get("batch")
	if b.Memory.QuotaBytes != 4<<30 || b.Memory.Eviction.Name != "lru" || b.Source != filepath.Join(dir, "batch.json") {
		t.Errorf("batch not overridden: %+v", b)
	}
	if orig, _ := BuiltinCatalog().Get("batch"); orig.Memory.Eviction.Name != "fifo" {
		t.Errorf("Merge changed the built-in catalog: %+v", orig)
	}
	if _, err := user.Merge(nil); !errors.Is(err, ErrUnknownPolicy) {
		t.Errorf("merge without default: %v", err)
	}
	if d := user.Default(); d.Name != "default" {
		t.Errorf("user.Default() = %q, want the built-in default", d.Name)
	}
	write("bad.json", `{"name":"bad","memory":{"eviction":{"name":"lru"},"prefetch":{"name":"none"}},"priority":{"class":"standard"},"extra":1}`)
	if _, err := LoadCatalogDir(dir); err == nil || !strings.Contains(err.Error(), "bad.json") || !strings.Contains(err.Error(), `"extra"`) {
		t.Errorf("bad user file: %v", err)
	}
}

func TestParseAlgorithm(t *testing.T) {
	for in, want := range map[string]string{"lfu": "lfu", "tree-threshold:threshold=60": "tree-threshold:threshold=60", "x:b=1,a=2": "x:a=2,b=1"} {
		a, err := ParseAlgorithm(in)
		if err != nil || a.String() != want {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want %s", in, a, err, want)
		}
	}
	for _, in := range []string{"", ":a=1", "lfu:", "lfu:decay", "lfu:decay=x", "lfu:decay=1,decay=2", "lfu:=3"} {
		if _, err := ParseAlgorithm(in); !errors.Is(err, ErrBadValue) {
			t.Errorf("ParseAlgorithm(%q) error = %v, want ErrBadValue", in, err)
		}
	}
}

// A latency target reads as a ratio or a duration, each to what the
// device runtime's settings carry.
func TestParseLatencyTarget(t *testing.T) {
	for in, want := range map[string]struct {
		ratio uint32
		p99   time.Duration
	}{"1.5x": {1500, 0}, "2x": {2000, 0}, "1.05x": {1050, 0}, "800us": {0, 800 * time.Microsecond}, "2ms": {0, 2 * time.Millisecond}, "1.2345ms": {0, 1234 * time.Microsecond}} {
		r, d, err := ParseLatencyTarget(in)
		if err != nil || r != want.ratio || d != want.p99 {
			t.Errorf("ParseLatencyTarget(%q) = %d, %v, %v; want %d, %v", in, r, d, err, want.ratio, want.p99)
		}
	}
	for _, bad := range []string{"", "x", "1.5", "-2x", "NaNx", "101x", "0.5x", "11s", "-1ms"} {
		if _, _, err := ParseLatencyTarget(bad); err == nil {
			t.Errorf("ParseLatencyTarget(%q): no error", bad)
		}
	}
}
