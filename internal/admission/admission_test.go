package admission

import (
	"strings"
	"testing"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/policies"
)

func TestAppendPreload(t *testing.T) {
	const lib = "/run/gpuext/devrt/libgpuext-devrt.so"
	for _, tc := range []struct{ existing, want string }{
		{"", lib},
		{"   ", lib},
		{"/usr/lib/libfoo.so", "/usr/lib/libfoo.so:" + lib},
		{"/a.so /b.so", "/a.so /b.so:" + lib},
		{"/a.so:" + lib, "/a.so:" + lib},                          // already there: not twice
		{lib + " /b.so", lib + " /b.so"},                          // space-separated, already there
		{"/x/libgpuext-devrt.so", "/x/libgpuext-devrt.so:" + lib}, // same name elsewhere is another library
	} {
		if got := AppendPreload(tc.existing, lib); got != tc.want {
			t.Errorf("AppendPreload(%q) = %q, want %q", tc.existing, got, tc.want)
		}
	}
}

func TestLookupEnvLastWins(t *testing.T) {
	env := []string{"PATH=/bin", "LD_PRELOAD=/a.so", "X=1", "LD_PRELOAD=/b.so"}
	if got := lookupEnv(env, "LD_PRELOAD"); got != "/b.so" {
		t.Errorf("lookupEnv = %q, want the last value /b.so", got)
	}
	if got := lookupEnv(env, "MISSING"); got != "" {
		t.Errorf("lookupEnv(MISSING) = %q", got)
	}
}

func TestTenantKey(t *testing.T) {
	for _, tc := range []struct {
		name   string
		info   ContainerInfo
		tenant string
		want   string
	}{
		{"container tenant, nri", ContainerInfo{ID: "c1", Runtime: bpf.RuntimeNRI, PodUID: "u1"}, "container", "nri/ctr/c1"},
		{"pod tenant by uid", ContainerInfo{ID: "c1", Runtime: bpf.RuntimeNRI, PodUID: "u1", PodName: "p"}, "pod", "nri/pod/u1"},
		{"pod tenant without uid", ContainerInfo{ID: "c1", Runtime: bpf.RuntimeNRI, PodName: "p", PodNamespace: "ns"}, "pod", "nri/pod/ns/p"},
		{"pod tenant outside a pod is the container", ContainerInfo{ID: "c1", Runtime: bpf.RuntimeRuncWrapper}, "pod", "oci/ctr/c1"},
		{"hook and wrapper share keys", ContainerInfo{ID: "c1", Runtime: bpf.RuntimeOCIHook}, "container", "oci/ctr/c1"},
	} {
		got := tenantKey(tc.info, policies.Selection{Tenant: tc.tenant})
		if got != tc.want {
			t.Errorf("%s: tenantKey = %q, want %q", tc.name, got, tc.want)
		}
		// the container's own key and the pod's, as the registry's readers
		// (StoredDecision, Remove, checkDecision) look them up
		if own := containerTenantKey(tc.info); tc.tenant == "container" && own != tc.want {
			t.Errorf("%s: containerTenantKey = %q, want %q", tc.name, own, tc.want)
		}
		pod, ok := podTenantKey(tc.info)
		if wantPod := strings.Contains(tc.want, "/pod/"); isPodKey(got, tc.info.Runtime) != wantPod || isPodKey(got, 0) != wantPod ||
			(wantPod && (!ok || pod != tc.want)) {
			t.Errorf("%s: isPodKey(%q) = %v, podTenantKey = %q %v", tc.name, got, isPodKey(got, tc.info.Runtime), pod, ok)
		}
	}
	// a pod key of another runtime is not this runtime's
	if isPodKey("nri/pod/u1", bpf.RuntimeOCIHook) || !isPodKey("oci/pod/u1", bpf.RuntimeRuncWrapper) {
		t.Error("isPodKey ignores the runtime")
	}
}

// TestTenantConfigFromCatalog checks the ABI values the kernel will read for
// every built-in policy: a name that maps to nothing would silently become 0
// (the driver default), so each must map to its own enum value.
func TestTenantConfigFromCatalog(t *testing.T) {
	cat := policies.BuiltinCatalog()
	for _, name := range cat.Names() {
		p, _ := cat.Get(name)
		if name == "quota" {
			p.Memory.QuotaBytes = 8 << 30
		}
		cfg := tenantConfig(p, false)
		if cfg.AbiVersion != bpf.ABIVersion {
			t.Errorf("%s: abi version %d", name, cfg.AbiVersion)
		}
		if _, ok := evictionIDs[p.Memory.Eviction.Name]; !ok {
			t.Errorf("%s: eviction %q has no ABI value", name, p.Memory.Eviction.Name)
		}
		if _, ok := prefetchIDs[p.Memory.Prefetch.Name]; !ok {
			t.Errorf("%s: prefetch %q has no ABI value", name, p.Memory.Prefetch.Name)
		}
		if got := PriorityClassName(cfg.PriorityClass); got != string(p.Priority.Class) {
			t.Errorf("%s: priority class round trip %q, want %q", name, got, p.Priority.Class)
		}
		if (cfg.QuotaBytes > 0) != (cfg.Flags&uint32(bpf.TenantFlagQuota) != 0) {
			t.Errorf("%s: quota %d but flags %#x", name, cfg.QuotaBytes, cfg.Flags)
		}
	}
	// Every algorithm the catalog grammar accepts has an ABI value.
	for i, spec := range policies.EvictionAlgorithms {
		if id, ok := evictionIDs[spec.Name]; !ok || int(id) != i {
			t.Errorf("eviction algorithm %q: ABI value %d (known %v), its catalog position is %d", spec.Name, id, ok, i)
		}
	}
	for i, spec := range policies.PrefetchAlgorithms {
		if id, ok := prefetchIDs[spec.Name]; !ok || int(id) != i {
			t.Errorf("prefetch algorithm %q: ABI value %d (known %v), its catalog position is %d", spec.Name, id, ok, i)
		}
	}
	if cfg := tenantConfig(cat.Default(), true); cfg.Flags&uint32(bpf.TenantFlagFailOpen) == 0 {
		t.Error("fail-open flag not set")
	}
}
