package kernelpolicy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/policies"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "objects", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// policyDir writes files (name -> content) into a new directory.
func policyDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if strings.HasPrefix(content, "@") {
			if err := os.WriteFile(filepath.Join(dir, name), fixture(t, content[1:]), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const (
	goodMem   = `{"name": "fx", "kind": "memory", "eviction": {"param": {"name": "hot", "min": 1, "max": 9, "default": 2}}}`
	goodSched = `{"name": "fxs", "kind": "scheduling", "classes": ["latency-critical"]}`
)

func TestLoadDir(t *testing.T) {
	dir := policyDir(t, map[string]string{
		"fx.json": goodMem, "fx.bpf.o": "@fx_mem.bpf.o",
		"fxs.json": goodSched, "fxs.bpf.o": "@fx_sched.bpf.o",
		"README": "not a policy", ".hidden.json": "{",
	})
	d, err := LoadDir(dir)
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	if got := strings.Join(d.Names(), ","); got != "fx,fxs" {
		t.Errorf("names %q, want fx,fxs", got)
	}
	algs := d.Algorithms()
	if len(algs.Eviction) != 1 || len(algs.Prefetch) != 0 || algs.Eviction[0].Name != "fx" ||
		algs.Eviction[0].Params[0] != (policies.ParamSpec{Name: "hot", Min: 1, Max: 9, Default: 2}) {
		t.Errorf("algorithms %+v", algs)
	}
	p, _ := d.Get("fx")
	if p.KernelKind() != KindMemory || p.ObjectPath != filepath.Join(dir, "fx.bpf.o") {
		t.Errorf("fx: kind %s object %s", p.KernelKind(), p.ObjectPath)
	}
	// The loader names the ops after the descriptor, whatever the object says.
	spec, err := p.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if err := checkObject(spec, &p.Descriptor, p.ObjectPath); err != nil {
		t.Fatal(err)
	}
	ms, _ := opsMapSpec(spec)
	name, _ := member(ms, "name")
	if got := strings.TrimRight(string(name), "\x00"); got != "fx" {
		t.Errorf("ops name %q, want fx", got)
	}
	s, _ := d.Get("fxs")
	spec, _ = s.Spec()
	checkObject(spec, &s.Descriptor, s.ObjectPath)
	ms, _ = opsMapSpec(spec)
	if c, _ := member(ms, "classes"); leUint32(c) != 1 {
		t.Errorf("sched classes %#x, want 0x1", leUint32(c))
	}
}

// Every bad descriptor and object, each with the error a user sees: the
// file, the field, what was wrong.
func TestLoadDirErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  []string
		is    error
	}{
		{"unknown field", map[string]string{"fx.json": `{"name": "fx", "kind": "memory", "evicton": {}}`},
			[]string{"fx.json", `unknown field "evicton"`, `did you mean "eviction"`}, ErrBadPolicyDir},
		{"field in another case", map[string]string{"fx.json": `{"Name": "fx", "kind": "memory"}`},
			[]string{"fx.json", `"Name"`}, ErrBadPolicyDir},
		{"field twice", map[string]string{"fx.json": `{"name": "fx", "name": "fx", "kind": "memory"}`},
			[]string{"fx.json", `"name"`}, ErrBadPolicyDir},
		{"trailing data", map[string]string{"fx.json": goodMem + `{}`}, []string{"fx.json", "trailing data"}, ErrBadPolicyDir},
		{"wrong type", map[string]string{"fx.json": `{"name": "fx", "kind": "memory", "eviction": {"param": {"name": "hot", "min": "1", "max": 2}}}`},
			[]string{"fx.json", "min", "int64"}, ErrBadPolicyDir},
		{"name not the file's", map[string]string{"fy.json": goodMem}, []string{"fy.json", "name:", `"fx" must match the file name "fy"`}, ErrBadPolicyDir},
		{"name too long", map[string]string{"a-very-long-name.json": `{"name": "a-very-long-name", "kind": "memory"}`},
			[]string{"a-very-long-name.json", "name:", "15 bytes"}, ErrBadPolicyDir},
		{"name upper case", map[string]string{"Fx.json": `{"name": "Fx", "kind": "memory"}`}, []string{"Fx.json", "name:"}, ErrBadPolicyDir},
		{"built-in algorithm name", map[string]string{"lru.json": `{"name": "lru", "kind": "memory", "eviction": {}}`},
			[]string{"lru.json", "name:", "built-in algorithm"}, ErrBadPolicyDir},
		{"built-in ops name", map[string]string{"pf-none.json": `{"name": "pf-none", "kind": "memory", "prefetch": {}}`},
			[]string{"pf-none.json", "name:", `ops "pf_none"`}, ErrBadPolicyDir},
		{"unknown kind", map[string]string{"fx.json": `{"name": "fx", "kind": "mem"}`}, []string{"fx.json", "kind:", `"mem"`}, ErrBadPolicyDir},
		{"memory without algorithm", map[string]string{"fx.json": `{"name": "fx", "kind": "memory"}`},
			[]string{"fx.json", "kind:", "needs eviction or prefetch"}, ErrBadPolicyDir},
		{"memory with classes", map[string]string{"fx.json": `{"name": "fx", "kind": "memory", "eviction": {}, "classes": ["standard"]}`},
			[]string{"fx.json", "classes:", "only a scheduling policy"}, ErrBadPolicyDir},
		{"scheduling without classes", map[string]string{"fx.json": `{"name": "fx", "kind": "scheduling"}`},
			[]string{"fx.json", "classes:", "at least one"}, ErrBadPolicyDir},
		{"scheduling with eviction", map[string]string{"fx.json": `{"name": "fx", "kind": "scheduling", "classes": ["standard"], "eviction": {}}`},
			[]string{"fx.json", "eviction:", "no memory algorithm"}, ErrBadPolicyDir},
		{"unknown class", map[string]string{"fx.json": `{"name": "fx", "kind": "scheduling", "classes": ["urgent"]}`},
			[]string{"fx.json", "classes[0]:", `"urgent"`}, ErrBadPolicyDir},
		{"class twice", map[string]string{"fx.json": `{"name": "fx", "kind": "scheduling", "classes": ["standard", "standard"]}`},
			[]string{"fx.json", "classes[1]:", "twice"}, ErrBadPolicyDir},
		{"param min 0", map[string]string{"fx.json": `{"name": "fx", "kind": "memory", "eviction": {"param": {"name": "hot", "min": 0, "max": 2}}}`},
			[]string{"fx.json", "eviction.param.min:", "below 1"}, ErrBadPolicyDir},
		{"param max below min", map[string]string{"fx.json": `{"name": "fx", "kind": "memory", "prefetch": {"param": {"name": "p", "min": 5, "max": 2}}}`},
			[]string{"fx.json", "prefetch.param.max:", "below min 5"}, ErrBadPolicyDir},
		{"param default out of range", map[string]string{"fx.json": `{"name": "fx", "kind": "memory", "eviction": {"param": {"name": "hot", "min": 1, "max": 9, "default": 10}}}`},
			[]string{"fx.json", "eviction.param.default:", "10 is out of range 1..9"}, ErrBadPolicyDir},
		{"param bad name", map[string]string{"fx.json": `{"name": "fx", "kind": "memory", "eviction": {"param": {"name": "Hot", "min": 1, "max": 9}}}`},
			[]string{"fx.json", "eviction.param.name:", `"Hot"`}, ErrBadPolicyDir},
		{"object outside the dir", map[string]string{"fx.json": `{"name": "fx", "kind": "memory", "object": "../fx.bpf.o", "eviction": {}}`},
			[]string{"fx.json", "object:", `"../fx.bpf.o"`}, ErrBadPolicyDir},
		{"object missing", map[string]string{"fx.json": goodMem}, []string{"fx.json", "object:", "fx.bpf.o"}, ErrBadPolicyDir},
		{"object not ELF", map[string]string{"fx.json": goodMem, "fx.bpf.o": "hello"}, []string{"fx.json", "fx.bpf.o", "not a BPF ELF object"}, ErrBadPolicyDir},
		{"object legacy section, unreadable", map[string]string{"fx.json": goodMem, "fx.bpf.o": "@fx_legacy_nobtf.bpf.o"},
			[]string{"fx.json", "fx.bpf.o", "legacy .struct_ops section", "no .BTF"}, ErrBadPolicyDir},
		{"object without SDK ABI", map[string]string{"fx.json": goodMem, "fx.bpf.o": "@fx_noabi.bpf.o"},
			[]string{"fx.json", "fx.bpf.o", "gpuext_policy_abi", "GPUEXT_POLICY_ABI"}, ErrBadPolicyDir},
		{"object for another ABI", map[string]string{"fx.json": goodMem, "fx.bpf.o": "@fx_abi99.bpf.o"},
			[]string{"fx.json", "fx.bpf.o", "built for gpuext ABI version 99", "this gpuext has ABI version 1", "rebuild"}, ErrABIMismatch},
		{"sched object as memory", map[string]string{"fx.json": goodMem, "fx.bpf.o": "@fx_sched.bpf.o"},
			[]string{"fx.json", "struct gpuext_sched_ops", "a memory policy is struct gpuext_mem_ops"}, ErrBadPolicyDir},
		{"memory object as sched", map[string]string{"fxs.json": goodSched, "fxs.bpf.o": "@fx_mem.bpf.o"},
			[]string{"fxs.json", "struct gpuext_mem_ops", "a scheduling policy is struct gpuext_sched_ops"}, ErrBadPolicyDir},
		{"promised hook missing", map[string]string{"fx.json": `{"name": "fx", "kind": "memory", "eviction": {}, "prefetch": {}}`, "fx.bpf.o": "@fx_mem.bpf.o"},
			[]string{"fx.json", "descriptor has prefetch", "no .prefetch"}, ErrBadPolicyDir},
		{"hook not in the descriptor", map[string]string{"fx.json": `{"name": "fx", "kind": "memory", "prefetch": {}}`, "fx.bpf.o": "@fx_mem.bpf.o"},
			[]string{"fx.json", ".evict_prepare", "descriptor has no evict"}, ErrBadPolicyDir},
		{"two ops maps", map[string]string{"fx.json": goodMem, "fx.bpf.o": "@fx_twomaps.bpf.o"},
			[]string{"fx.json", "two struct_ops maps"}, ErrBadPolicyDir},
		{"classes disagree", map[string]string{"fxs.json": `{"name": "fxs", "kind": "scheduling", "classes": ["best-effort"]}`, "fxs.bpf.o": "@fx_sched.bpf.o"},
			[]string{"fxs.json", "claim classes 0x1", "descriptor's classes are 0x4"}, ErrBadPolicyDir},
		{"descriptor too large", map[string]string{"fx.json": `{"name": "fx", "kind": "memory", "description": "` + strings.Repeat("x", MaxDescriptorBytes) + `"}`},
			[]string{"fx.json", "larger than 65536 bytes"}, ErrBadPolicyDir},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadDir(policyDir(t, tc.files))
			if err == nil {
				t.Fatalf("LoadDir: no error, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("error %q is not %v", err, tc.is)
			}
		})
	}
}

// A descriptor or object reached through a symlink is refused.
func TestLoadDirSymlinks(t *testing.T) {
	dir := policyDir(t, map[string]string{"fx.json": goodMem, "real.o": "@fx_mem.bpf.o"})
	if err := os.Symlink("real.o", filepath.Join(dir, "fx.bpf.o")); err != nil {
		t.Fatal(err)
	}
	_, err := LoadDir(dir)
	if err == nil || !strings.Contains(err.Error(), "fx.bpf.o is not a regular file") {
		t.Errorf("object through a symlink: %v", err)
	}
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "fx.json"), []byte(goodMem), 0o644)
	dir = policyDir(t, map[string]string{"fx.bpf.o": "@fx_mem.bpf.o"})
	if err := os.Symlink(filepath.Join(other, "fx.json"), filepath.Join(dir, "fx.json")); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDir(dir); err == nil || !strings.Contains(err.Error(), "fx.json is not a regular file") {
		t.Errorf("descriptor through a symlink: %v", err)
	}
}

// A loose object (policies attach --object) takes its kind and hooks from
// the object and its name from --name or the file.
func TestObjectPolicy(t *testing.T) {
	dir := policyDir(t, map[string]string{"fx-mem.bpf.o": "@fx_mem.bpf.o", "fx-sched.bpf.o": "@fx_sched.bpf.o", "bad.o": "@fx_abi99.bpf.o"})
	p, err := ObjectPolicy(filepath.Join(dir, "fx-mem.bpf.o"), "")
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "fx-mem" || p.Kind != "memory" || p.Eviction == nil || p.Prefetch != nil {
		t.Errorf("fx-mem: %+v", p.Descriptor)
	}
	p, err = ObjectPolicy(filepath.Join(dir, "fx-sched.bpf.o"), "mine")
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "mine" || p.Kind != "scheduling" || len(p.Classes) != 1 || p.Classes[0] != policies.LatencyCritical {
		t.Errorf("fx-sched as mine: %+v", p.Descriptor)
	}
	for _, tc := range []struct{ file, name, want string }{
		{"fx-mem.bpf.o", "Mine", `--name: "Mine" must match`},
		{"fx-mem.bpf.o", "lfu", `--name: "lfu" is a built-in algorithm`},
		{"bad.o", "", "built for gpuext ABI version 99"},
		{"missing.o", "", "no such file"},
	} {
		if _, err := ObjectPolicy(filepath.Join(dir, tc.file), tc.name); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ObjectPolicy(%s, %q): %v, want %q", tc.file, tc.name, err, tc.want)
		}
	}
}

// A catalog policy and a container's override name a directory policy
// like a built-in algorithm; its parameter's range is checked, and the
// tenant config gets the id the core gives its ops.
func TestDirAlgorithmsInCatalog(t *testing.T) {
	d, err := LoadDir(policyDir(t, map[string]string{"fx.json": goodMem, "fx.bpf.o": "@fx_mem.bpf.o"}))
	if err != nil {
		t.Fatal(err)
	}
	algs, err := policies.BuiltinAlgorithms().With(d.Algorithms())
	if err != nil {
		t.Fatal(err)
	}
	catDir := t.TempDir()
	write := func(body string) {
		os.WriteFile(filepath.Join(catDir, "mine.json"), []byte(body), 0o644)
	}
	write(`{"name": "mine", "memory": {"eviction": {"name": "fx"}, "prefetch": {"name": "default"}}, "priority": {"class": "standard"}}`)
	cat, err := policies.LoadCatalogDirWith(catDir, algs)
	if err != nil {
		t.Fatalf("catalog naming fx: %v", err)
	}
	p, _ := cat.Get("mine")
	if p.Memory.Eviction.Params["hot"] != 2 {
		t.Errorf("fx's default parameter not filled in: %+v", p.Memory.Eviction)
	}
	if _, err := policies.LoadCatalogDir(catDir); err == nil || !strings.Contains(err.Error(), `unknown eviction policy "fx"`) {
		t.Errorf("catalog naming fx without the policy dir: %v", err)
	}
	for body, want := range map[string]string{
		`{"name": "mine", "memory": {"eviction": {"name": "fx", "params": {"hot": 10}}, "prefetch": {"name": "default"}}, "priority": {"class": "standard"}}`: "memory.eviction.params.hot: 10 is out of range 1..9",
		`{"name": "mine", "memory": {"eviction": {"name": "fx", "params": {"cold": 1}}, "prefetch": {"name": "default"}}, "priority": {"class": "standard"}}`: `memory.eviction.params.cold: eviction policy "fx" has no parameter "cold" (want hot)`,
		`{"name": "mine", "memory": {"eviction": {"name": "default"}, "prefetch": {"name": "fx"}}, "priority": {"class": "standard"}}`:                        `memory.prefetch.name: unknown prefetch policy "fx"`,
	} {
		write(body)
		if _, err := policies.LoadCatalogDirWith(catDir, algs); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("catalog %s: %v, want %q", body, err, want)
		}
	}
	// Overrides: the annotation names fx under the merged catalog.
	merged := policies.BuiltinCatalog().WithAlgorithms(algs)
	sel, err := merged.Select(policies.Request{Annotations: map[string]string{"eviction.gpuext.io": "fx:hot=3"}})
	if err != nil {
		t.Fatalf("override eviction fx:hot=3: %v", err)
	}
	if sel.Policy.Memory.Eviction.Name != "fx" || sel.Policy.Memory.Eviction.Params["hot"] != 3 {
		t.Errorf("selected %+v", sel.Policy.Memory.Eviction)
	}
	for v, want := range map[string]string{"fx:hot=0": "0 is out of range 1..9", "fx:warm=1": `has no parameter "warm"`} {
		_, err := merged.Select(policies.Request{Annotations: map[string]string{"eviction.gpuext.io": v}})
		if err == nil || !strings.Contains(err.Error(), "eviction.gpuext.io="+`"`+v+`"`) || !strings.Contains(err.Error(), want) {
			t.Errorf("override %s: %v, want the key, the value and %q", v, err, want)
		}
	}
	if _, err := policies.BuiltinCatalog().Select(policies.Request{Annotations: map[string]string{"eviction.gpuext.io": "fx"}}); err == nil {
		t.Errorf("override fx accepted without the policy dir")
	}
	if id := bpf.NamedPolicyID("fx"); id&bpf.PolicyNamed == 0 {
		t.Errorf("named id %#x lacks the named bit", id)
	}
}
