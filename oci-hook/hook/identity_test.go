package hook

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/policies"
)

// GpuextKeys keeps what the agent's selection reads as a gpuext key,
// look-alikes included (a Cyrillic letter, a zero-width space, upper case,
// a trailing dot): the wrapper copies such a Docker label into config.json
// like any gpuext key, and the agent names it in its error, instead of the
// hook dropping what the agent would refuse.
func TestGpuextKeys(t *testing.T) {
	for _, tc := range []struct {
		key       string
		ours      bool
		lookalike bool // selection refuses it as an unknown key
	}{
		{"policy.gpuext.io", true, false},
		{"policy.gpuext.io/container.web", true, false},
		{"gpuext.io", true, true},
		{"gpuext.io/x", true, true},
		{"Quota.GPUext.io/pod", true, true},
		{"p\u043elicy.gpuext.io", true, true},  // Cyrillic o
		{"policy.gpu\u0435xt.io", true, true},  // Cyrillic e in the domain
		{"policy.gpuext.io\u200b", true, true}, // zero-width space
		{"policy.gpuext.io.", true, true},      // trailing dot
		{"policy\uff0egpuext.io", true, true},  // fullwidth dot
		{"notgpuext.io", false, false},
		{"io.gpuext.oci.container-name", false, false},
		{"org.opencontainers.image.title", false, false},
		{"example.com/policy.gpuext.io", false, false},
	} {
		got := GpuextKeys(map[string]string{tc.key: "batch", "other.example.com": "x"})
		if _, ok := got[tc.key]; ok != tc.ours || len(got) > 1 {
			t.Errorf("GpuextKeys(%q) = %q, want the key kept: %v", tc.key, got, tc.ours)
		}
		_, err := policies.BuiltinCatalog().Select(policies.Request{Labels: map[string]string{tc.key: "batch"}})
		if unknown := errors.Is(err, policies.ErrUnknownKey); unknown != tc.lookalike {
			t.Errorf("selection of %q: %v; want an unknown-key error: %v", tc.key, err, tc.lookalike)
		}
	}
}

func TestContainerName(t *testing.T) {
	tests := []struct {
		ann  map[string]string
		want string
	}{
		{nil, "id1"},
		{map[string]string{"io.kubernetes.cri.container-name": "cri"}, "cri"},
		{map[string]string{"io.kubernetes.cri.container-name": "cri", AnnotationContainerName: "docker"}, "docker"},
		{map[string]string{"nerdctl/name": "n"}, "n"},
		{map[string]string{AnnotationContainerName: ""}, "id1"},
	}
	for _, tt := range tests {
		if got := ContainerName("id1", tt.ann); got != tt.want {
			t.Errorf("ContainerName(%v) = %q, want %q", tt.ann, got, tt.want)
		}
	}
}

func TestHookContainerInfo(t *testing.T) {
	b, err := ParseBundle("/b", []byte(`{"ociVersion":"1.0.2","process":{"env":["A=1"]},
		"annotations":{"policy.gpuext.io":"batch","io.gpuext.oci.container-name":"web"},
		"linux":{"cgroupsPath":"/docker/c1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	st := &specs.State{ID: "c1", Pid: 99, Bundle: "/b", Annotations: map[string]string{"x": "y"}}
	info := HookContainerInfo(st, b, StageCreateRuntime)
	if info.ID != "c1" || info.Name != "web" || info.Pid != 99 || info.CgroupsPath != "/docker/c1" ||
		info.Runtime != bpf.RuntimeOCIHook || info.Annotations["policy.gpuext.io"] != "batch" ||
		info.Annotations["x"] != "y" || len(info.Env) != 1 {
		t.Fatalf("info = %+v", info)
	}
	if info := HookContainerInfo(st, b, StageCreateContainer); info.Pid != 0 {
		t.Fatalf("createContainer pid = %d, want 0 (not a host pid)", info.Pid)
	}
	if info := HookContainerInfo(st, nil, StagePoststop); info.ID != "c1" || info.Name != "c1" {
		t.Fatalf("poststop without bundle: %+v", info)
	}
}

func TestWrapperContainerInfo(t *testing.T) {
	b, err := ParseBundle("/b", []byte(`{"ociVersion":"1.0.2","process":{"env":["LD_PRELOAD=/a.so"]},
		"annotations":{"priority.gpuext.io":"best-effort","org.example":"x"},"linux":{"cgroupsPath":"/docker/c1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	cmd := RuncCommand{Command: "create", ContainerID: "c1", Bundle: "/b"}
	dc := DockerContainer{Name: "web", Labels: map[string]string{
		"policy.gpuext.io": "batch", "priority.gpuext.io": "latency-critical", "com.example.team": "a"}}
	info := WrapperContainerInfo(cmd, b, dc)
	if info.Name != "web" || info.Runtime != bpf.RuntimeRuncWrapper || info.CgroupsPath != "/docker/c1" {
		t.Fatalf("info = %+v", info)
	}
	// Labels are copied into annotations for the hook; an annotation wins
	// over a label of the same key, as in selection.
	want := map[string]string{"policy.gpuext.io": "batch", "priority.gpuext.io": "best-effort", "org.example": "x",
		AnnotationContainerName: "web"}
	for k, v := range want {
		if info.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, info.Annotations[k], v)
		}
	}
	if _, ok := info.Annotations["com.example.team"]; ok {
		t.Errorf("non-gpuext label copied: %v", info.Annotations)
	}
	if info.Labels["com.example.team"] != "a" {
		t.Errorf("labels = %v", info.Labels)
	}
	// Without dockerd's config (podman, plain runc): annotations only, name = id.
	info = WrapperContainerInfo(cmd, b, DockerContainer{})
	if info.Name != "c1" || info.Labels != nil || info.Annotations["priority.gpuext.io"] != "best-effort" {
		t.Fatalf("info = %+v", info)
	}
}

func TestReadDockerContainer(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "containers", "c1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := `{"ID":"c1","Name":"/web","Config":{"Image":"gx:1","Labels":{"policy.gpuext.io":"batch"}},"State":{"Running":false}}`
	if err := os.WriteFile(filepath.Join(dir, "config.v2.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	dc, found, err := ReadDockerContainer(root, "c1")
	if err != nil || !found || dc.Name != "web" || dc.Labels["policy.gpuext.io"] != "batch" {
		t.Fatalf("ReadDockerContainer = %+v, %v, %v", dc, found, err)
	}
	for _, id := range []string{"absent", "", "..", "a/b"} {
		if _, found, err := ReadDockerContainer(root, id); found || err != nil {
			t.Errorf("id %q: found=%v err=%v", id, found, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "config.v2.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadDockerContainer(root, "c1"); err == nil {
		t.Fatal("malformed config.v2.json: no error")
	}
}

// TestSpecUser: who config.json says the process is, as the MPS injection
// needs it (mpsRootTenants): uid 0 is the host's root unless the container
// has a user namespace (the namespace, or uid mappings).
func TestSpecUser(t *testing.T) {
	for _, tc := range []struct {
		name     string
		spec     *specs.Spec
		hostRoot bool
	}{
		{"no process", &specs.Spec{}, true},
		{"root", &specs.Spec{Process: &specs.Process{}}, true},
		{"uid 1000", &specs.Spec{Process: &specs.Process{User: specs.User{UID: 1000}}}, false},
		{"root in a user namespace", &specs.Spec{Process: &specs.Process{},
			Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.UserNamespace}}}}, false},
		{"root with uid mappings", &specs.Spec{Process: &specs.Process{},
			Linux: &specs.Linux{UIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}}}, false},
	} {
		if got := SpecUser(tc.spec); got.HostRoot() != tc.hostRoot {
			t.Errorf("%s: %+v: HostRoot %v, want %v", tc.name, got, got.HostRoot(), tc.hostRoot)
		}
	}
}
