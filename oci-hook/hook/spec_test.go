package hook

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/agentapi"
)

// testInjection is what the admission core returns for a tenant (the shape
// of admission.Core.injection), with LD_PRELOAD computed from env.
func testInjection(env []string) admission.Injection {
	lib := admission.ContainerDevrtDir + "/" + admission.DevrtLibrary
	cur := ""
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == admission.EnvLDPreload {
			cur = v
		}
	}
	return admission.Injection{
		Mounts: []admission.Mount{
			{Source: "/opt/gpuext/devrt", Destination: admission.ContainerDevrtDir, Options: []string{"rbind", "ro", "nosuid", "nodev"}},
			{Source: "/run/gpuext/tenants/3", Destination: admission.ContainerTenantDir, Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}},
		},
		Env: []admission.EnvVar{
			{Key: admission.EnvLDPreload, Value: admission.AppendPreload(cur, lib)},
			{Key: admission.EnvTenantID, Value: "3"},
			{Key: admission.EnvPolicy, Value: "batch"},
		},
	}
}

func loadFixture(t *testing.T, name string) (*Bundle, []byte) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseBundle("/bundle", data)
	if err != nil {
		t.Fatal(err)
	}
	return b, data
}

func envOf(t *testing.T, b *Bundle) []string {
	t.Helper()
	out, err := b.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var s specs.Spec
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatal(err)
	}
	return s.Process.Env
}

func TestInjectEnv(t *testing.T) {
	lib := admission.ContainerDevrtDir + "/" + admission.DevrtLibrary
	tests := []struct {
		name        string
		env         []string
		wantPreload string
	}{
		{name: "no LD_PRELOAD", env: []string{"PATH=/bin"}, wantPreload: lib},
		{name: "existing LD_PRELOAD is kept first", env: []string{"LD_PRELOAD=/a.so", "PATH=/bin"}, wantPreload: "/a.so:" + lib},
		{name: "two LD_PRELOAD entries: the last wins, one remains", env: []string{"LD_PRELOAD=/a.so", "LD_PRELOAD=/b.so"},
			wantPreload: "/b.so:" + lib},
		{name: "empty LD_PRELOAD", env: []string{"LD_PRELOAD="}, wantPreload: lib},
		{name: "no env at all", env: nil, wantPreload: lib},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, _ := json.Marshal(map[string]any{"ociVersion": "1.0.2", "process": map[string]any{"env": tt.env, "args": []string{"sh"}}})
			b, err := ParseBundle("/b", raw)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // a second run (runc retried by the shim) changes nothing
				inj := testInjection(b.Spec.Process.Env)
				if err := b.SetEnv(inj.Env); err != nil {
					t.Fatal(err)
				}
			}
			env := envOf(t, b)
			var preloads []string
			for _, kv := range env {
				if v, ok := strings.CutPrefix(kv, "LD_PRELOAD="); ok {
					preloads = append(preloads, v)
				}
			}
			if len(preloads) != 1 || preloads[0] != tt.wantPreload {
				t.Fatalf("LD_PRELOAD entries = %q, want [%q] (env %q)", preloads, tt.wantPreload, env)
			}
			if !slices.Contains(env, "GPUEXT_TENANT_ID=3") || !slices.Contains(env, "GPUEXT_POLICY=batch") {
				t.Fatalf("env = %q", env)
			}
			for _, kv := range tt.env {
				if !strings.HasPrefix(kv, "LD_PRELOAD=") && !slices.Contains(env, kv) {
					t.Fatalf("lost %q: %q", kv, env)
				}
			}
		})
	}
}

func TestInjectIdempotent(t *testing.T) {
	b, _ := loadFixture(t, "docker-20.10-config.json")
	hooks := HookEntries("/usr/local/bin/gpuext-oci-hook", "/etc/gpuext/config.json")
	info := admission.ContainerInfo{Annotations: map[string]string{"policy.gpuext.io": "batch", AnnotationContainerName: "web"}}
	var first []byte
	for i := range 3 {
		if err := Inject(b, info, agentapi.Answer{Decision: agentapi.Decision{Tenant: 3, TenantKey: "oci/ctr/x", ConfigDigest: "d"}, Injection: testInjection(b.Spec.Process.Env)}, hooks); err != nil {
			t.Fatal(err)
		}
		out, err := b.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = out
		} else if string(out) != string(first) {
			t.Fatalf("run %d changed config.json again:\n%s\nvs\n%s", i+1, out, first)
		}
	}
	var s specs.Spec
	if err := json.Unmarshal(first, &s); err != nil {
		t.Fatal(err)
	}
	count := func(dst string) int {
		n := 0
		for _, m := range s.Mounts {
			if m.Destination == dst {
				n++
				if m.Type != "bind" || !slices.Contains(m.Options, "ro") {
					t.Errorf("mount %s = %+v, want a read-only bind", dst, m)
				}
			}
		}
		return n
	}
	if count(admission.ContainerDevrtDir) != 1 || count(admission.ContainerTenantDir) != 1 {
		t.Fatalf("mounts: %+v", s.Mounts)
	}
	if len(s.Hooks.CreateRuntime) != 1 || len(s.Hooks.Poststop) != 1 {
		t.Fatalf("hooks: %+v", s.Hooks)
	}
	h := s.Hooks.CreateRuntime[0]
	wantArgs := []string{"gpuext-oci-hook", "--config", "/etc/gpuext/config.json", "createRuntime"}
	if h.Path != "/usr/local/bin/gpuext-oci-hook" || !slices.Equal(h.Args, wantArgs) || h.Timeout == nil || *h.Timeout != HookTimeout {
		t.Fatalf("createRuntime hook = %+v", h)
	}
	if got := s.Hooks.Poststop[0].Args; got[len(got)-1] != "poststop" {
		t.Fatalf("poststop hook args = %q", got)
	}
	if len(s.Hooks.Prestart) != 1 || !strings.HasSuffix(s.Hooks.Prestart[0].Path, "/exe") { //nolint:staticcheck
		t.Fatalf("docker's own prestart hook changed: %+v", s.Hooks.Prestart) //nolint:staticcheck
	}
	if s.Annotations["policy.gpuext.io"] != "batch" || s.Annotations[AnnotationContainerName] != "web" {
		t.Fatalf("annotations = %v", s.Annotations)
	}
}

func TestInjectReplacesStaleMount(t *testing.T) {
	raw := `{"ociVersion":"1.0.2","mounts":[{"destination":"/run/gpuext/tenant/","type":"bind","source":"/old","options":["ro"]}]}`
	b, err := ParseBundle("/b", []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AddMounts(testInjection(nil).Mounts); err != nil {
		t.Fatal(err)
	}
	if len(b.Spec.Mounts) != 2 {
		t.Fatalf("mounts = %+v", b.Spec.Mounts)
	}
	out, _ := b.Marshal()
	if strings.Contains(string(out), `"/old"`) || strings.Count(string(out), `"destination":"/run/gpuext/tenant"`) != 1 {
		t.Fatalf("stale mount kept: %s", out)
	}
}

// TestInjectRoundTrip edits real and future-proof config.json fixtures and
// checks that removing exactly what gpuext added gives back the original:
// nothing the wrapper does not own is lost or changed.
func TestInjectRoundTrip(t *testing.T) {
	for _, name := range []string{"docker-20.10-config.json", "future-fields-config.json"} {
		t.Run(name, func(t *testing.T) {
			b, orig := loadFixture(t, name)
			info := admission.ContainerInfo{Annotations: map[string]string{"policy.gpuext.io": "batch", "quota.gpuext.io": "1GiB"}}
			inj := testInjection(b.Spec.Process.Env)
			if err := Inject(b, info, agentapi.Answer{Decision: agentapi.Decision{Tenant: 3, TenantKey: "oci/ctr/x", ConfigDigest: "d"}, Injection: inj}, HookEntries("/h/gpuext-oci-hook", "")); err != nil {
				t.Fatal(err)
			}
			out, err := b.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			got := decodeAny(t, out)
			want := decodeAny(t, orig)

			// Undo the edits on the decoded document.
			hooks := got["hooks"].(map[string]any)
			for _, st := range []string{"createRuntime", "poststop"} {
				list := hooks[st].([]any)
				if h := list[len(list)-1].(map[string]any); h["path"] != "/h/gpuext-oci-hook" {
					t.Fatalf("last %s hook = %v", st, h)
				}
				if len(list) == 1 {
					delete(hooks, st)
				} else {
					hooks[st] = list[:len(list)-1]
				}
			}
			mounts := got["mounts"].([]any)
			got["mounts"] = mounts[:len(mounts)-2]
			ann := got["annotations"].(map[string]any)
			if ann[admission.AnnotationDecision] != `{"tenant":3,"tenantKey":"oci/ctr/x","policy":"","configDigest":"d"}` {
				t.Errorf("decision annotation = %v", ann[admission.AnnotationDecision])
			}
			delete(ann, "quota.gpuext.io")
			delete(ann, admission.AnnotationDecision)
			if _, had := want["annotations"]; !had {
				delete(ann, "policy.gpuext.io")
				if len(ann) == 0 {
					delete(got, "annotations")
				}
			}
			proc := got["process"].(map[string]any)
			var env []any
			for _, kv := range proc["env"].([]any) {
				s := kv.(string)
				if strings.HasPrefix(s, "GPUEXT_") {
					continue
				}
				if v, ok := strings.CutPrefix(s, "LD_PRELOAD="); ok {
					v = strings.TrimSuffix(strings.TrimSuffix(v, admission.ContainerDevrtDir+"/"+admission.DevrtLibrary), ":")
					if v == "" {
						continue
					}
					s = "LD_PRELOAD=" + v
				}
				env = append(env, s)
			}
			proc["env"] = env
			if !reflect.DeepEqual(got, want) {
				g, _ := json.MarshalIndent(got, "", " ")
				w, _ := json.MarshalIndent(want, "", " ")
				t.Fatalf("round trip changed the document:\n--- got\n%s\n--- want\n%s", g, w)
			}
			// Numbers keep their text (no float64 round trip).
			if name == "future-fields-config.json" && !strings.Contains(string(out), "12345678901234567890") {
				t.Fatalf("big number lost: %s", out)
			}
		})
	}
}

func decodeAny(t *testing.T, data []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestBundleWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	_, orig := loadFixture(t, "future-fields-config.json")
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := LoadBundle(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetEnv([]admission.EnvVar{{Key: "A", Value: "1"}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Write(); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("temp files left: %v", ents)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v, want 0600 kept", fi.Mode())
	}
	b2, err := LoadBundle(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(b2.Spec.Process.Env, "A=1") {
		t.Fatalf("env = %q", b2.Spec.Process.Env)
	}
}

func TestLoadBundleErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadBundle(dir); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Fatalf("missing config.json: err = %v", err)
	}
	for _, bad := range []string{"[]", "null", "{", `{"process":{"env":"x"}}`} {
		if _, err := ParseBundle(dir, []byte(bad)); err == nil {
			t.Errorf("ParseBundle(%s) succeeded", bad)
		}
	}
}
