package policies

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestSelect(t *testing.T) {
	cat := BuiltinCatalog()
	for _, tc := range []struct {
		name    string
		req     Request
		policy  string
		summary string // "" = not checked
		tenant  string
		sources map[string]string
		kernels []string // Selection.ProbeKernels
	}{
		{name: "no keys: default", req: Request{ContainerName: "web", Labels: map[string]string{"app": "web", "nvidia.com/gpu": "1"}},
			policy: "default", summary: "class=standard quota=unlimited evict=lru prefetch=tree-threshold(threshold=51)", tenant: "container"},
		{name: "docker label", req: Request{Labels: map[string]string{"policy.gpuext.io": "batch"}},
			policy: "batch", sources: map[string]string{KeyPolicy: "policy.gpuext.io"}},
		{name: "quota policy with its parameter", req: Request{ContainerName: "web", PodAnnotations: map[string]string{"policy.gpuext.io": "quota", "quota.gpuext.io/container.web": "8GiB"}},
			policy: "quota", summary: "class=standard quota=8GiB evict=tenant-quota prefetch=default",
			sources: map[string]string{KeyPolicy: "policy.gpuext.io", KeyQuota: "quota.gpuext.io/container.web"}},
		{name: "precedence container > pod > plain", req: Request{ContainerName: "web", PodAnnotations: map[string]string{
			"policy.gpuext.io": "batch", "policy.gpuext.io/pod": "vector-search", "policy.gpuext.io/container.web": "latency-critical",
			"policy.gpuext.io/container.sidecar": "nonexistent"}},
			policy: "latency-critical", sources: map[string]string{KeyPolicy: "policy.gpuext.io/container.web"}},
		{name: "pod > plain", req: Request{ContainerName: "sidecar", PodAnnotations: map[string]string{
			"policy.gpuext.io": "batch", "policy.gpuext.io/pod": "vector-search", "policy.gpuext.io/container.web": "latency-critical"}},
			policy: "vector-search"},
		{name: "pod label scoped beats container annotation plain", req: Request{ContainerName: "web",
			Annotations: map[string]string{"policy.gpuext.io": "batch"}, PodLabels: map[string]string{"policy.gpuext.io/pod": "vector-search"}},
			policy: "vector-search", sources: map[string]string{KeyPolicy: "policy.gpuext.io/pod"}},
		{name: "same key: annotation beats label", req: Request{ContainerName: "web",
			Annotations: map[string]string{"policy.gpuext.io": "batch"}, Labels: map[string]string{"policy.gpuext.io": "vector-search"}},
			policy: "batch"},
		{name: "same key: container label beats pod annotation", req: Request{
			Labels: map[string]string{"priority.gpuext.io": "best-effort"}, PodAnnotations: map[string]string{"priority.gpuext.io": "latency-critical"}},
			policy: "default", summary: "class=best-effort quota=unlimited evict=lru prefetch=tree-threshold(threshold=51)"},
		{name: "pod annotation beats pod label", req: Request{
			PodLabels: map[string]string{"policy.gpuext.io": "batch"}, PodAnnotations: map[string]string{"policy.gpuext.io": "vector-search"}},
			policy: "vector-search"},
		{name: "all overrides", req: Request{ContainerName: "w", Annotations: map[string]string{
			"policy.gpuext.io": "batch", "quota.gpuext.io": "512MiB", "priority.gpuext.io": "standard",
			"eviction.gpuext.io": "lfu", "prefetch.gpuext.io": "tree-threshold:threshold=60", "timeslice.gpuext.io": "2ms",
			"interleave.gpuext.io": "4", "probes.gpuext.io": "launch-stats, sm-histogram", "tenant.gpuext.io": "pod"}},
			policy: "batch", tenant: "pod",
			summary: "class=standard quota=512MiB evict=lfu(decay=50) prefetch=tree-threshold(threshold=60) timeslice=2ms interleave=4 probes=launch-stats,sm-histogram"},
		{name: "best-effort batch keeps its SM share", req: Request{Labels: map[string]string{"policy.gpuext.io": "batch"}},
			policy: "batch", summary: "class=best-effort quota=unlimited evict=fifo prefetch=always-max timeslice=16ms interleave=1 sm=40% mps-priority=1"},
		{name: "freq-decay with its default period", req: Request{Annotations: map[string]string{"eviction.gpuext.io": "freq-decay"}},
			policy: "default", summary: "class=standard quota=unlimited evict=freq-decay(period=4) prefetch=tree-threshold(threshold=51)"},
		{name: "timeslice in us", req: Request{Labels: map[string]string{"timeslice.gpuext.io": "500us"}},
			policy: "default", summary: "class=standard quota=unlimited evict=lru prefetch=tree-threshold(threshold=51) timeslice=500us"},
		{name: "empty probes clears", req: Request{Labels: map[string]string{"probes.gpuext.io": ""}}, policy: "default"},
		{name: "probe kernels", req: Request{Annotations: map[string]string{"probes.gpuext.io": "launch-stats",
			"probe-kernels.gpuext.io": " _Z4vaddPKfS0_Pfi, $x.y_1 ,_ZN2at6native29vectorized_elementwise_kernelILi4EEEviT_"}},
			policy: "default", kernels: []string{"_Z4vaddPKfS0_Pfi", "$x.y_1", "_ZN2at6native29vectorized_elementwise_kernelILi4EEEviT_"},
			sources: map[string]string{KeyProbes: "probes.gpuext.io", KeyProbeKernels: "probe-kernels.gpuext.io"}},
		{name: "probe kernels: container > pod > plain", req: Request{ContainerName: "web", Annotations: map[string]string{"probes.gpuext.io": "launch-stats"},
			PodAnnotations: map[string]string{"probe-kernels.gpuext.io": "a", "probe-kernels.gpuext.io/pod": "b", "probe-kernels.gpuext.io/container.web": "c",
				"probe-kernels.gpuext.io/container.db": "d"}},
			policy: "default", kernels: []string{"c"}, sources: map[string]string{KeyProbeKernels: "probe-kernels.gpuext.io/container.web"}},
		{name: "probe kernels: annotation over label", req: Request{Labels: map[string]string{"probes.gpuext.io": "launch-stats", "probe-kernels.gpuext.io": "fromLabel"},
			Annotations: map[string]string{"probe-kernels.gpuext.io": "fromAnnotation"}},
			policy: "default", kernels: []string{"fromAnnotation"}},
		{name: "probe kernels: empty is no limit", req: Request{ContainerName: "web", Labels: map[string]string{"probes.gpuext.io": "launch-stats"},
			PodAnnotations: map[string]string{"probe-kernels.gpuext.io/pod": "k", "probe-kernels.gpuext.io/container.web": " "}},
			policy: "default", kernels: nil},
		{name: "probe kernels: empty without probes", req: Request{Labels: map[string]string{"probe-kernels.gpuext.io": ""}}, policy: "default"},
		{name: "probe kernels: 64 names of 512 bytes", req: Request{Labels: map[string]string{"probes.gpuext.io": "launch-stats",
			"probe-kernels.gpuext.io": kernelList(64, 512)}}, policy: "default", kernels: strings.Split(kernelList(64, 512), ",")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := cat.Select(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if sel.Policy.Name != tc.policy {
				t.Errorf("policy = %q, want %q", sel.Policy.Name, tc.policy)
			}
			if tc.summary != "" && sel.Policy.Summary() != tc.summary {
				t.Errorf("summary = %q\n want   %q", sel.Policy.Summary(), tc.summary)
			}
			if tc.tenant != "" && sel.Tenant != tc.tenant {
				t.Errorf("tenant = %q, want %q", sel.Tenant, tc.tenant)
			}
			for k, v := range tc.sources {
				if sel.Sources[k] != v {
					t.Errorf("Sources[%s] = %q, want %q", k, sel.Sources[k], v)
				}
			}
			if !slices.Equal(sel.ProbeKernels, tc.kernels) {
				t.Errorf("ProbeKernels = %q, want %q", sel.ProbeKernels, tc.kernels)
			}
			if err := sel.Policy.Validate(); err != nil {
				t.Errorf("selected policy does not validate: %v", err)
			}
		})
	}
}

// kernelList is n distinct kernel names of size bytes each, comma-separated.
func kernelList(n, size int) string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("_k%03d", i) + strings.Repeat("x", size-5)
	}
	return strings.Join(names, ",")
}

func TestSelectErrors(t *testing.T) {
	cat := BuiltinCatalog()
	for _, tc := range []struct {
		name     string
		req      Request
		key      string
		sentinel error
		msg      string
	}{
		{"unknown policy", Request{Labels: map[string]string{"policy.gpuext.io": "gold"}}, "policy.gpuext.io", ErrUnknownPolicy, `unknown policy "gold"`},
		{"bad quota unit", Request{ContainerName: "web", PodAnnotations: map[string]string{"quota.gpuext.io/container.web": "12XB"}},
			"quota.gpuext.io/container.web", ErrBadSize, `unknown unit "XB"`},
		{"negative quota", Request{Labels: map[string]string{"quota.gpuext.io": "-1GiB"}}, "quota.gpuext.io", ErrBadSize, "negative"},
		{"overflowing quota", Request{PodLabels: map[string]string{"quota.gpuext.io/pod": "99999999999TiB"}}, "quota.gpuext.io/pod", ErrBadSize, "overflows"},
		{"typo key", Request{Labels: map[string]string{"polcy.gpuext.io": "batch"}}, "polcy.gpuext.io", ErrUnknownKey, `did you mean "policy.gpuext.io"`},
		{"typo suffix", Request{PodAnnotations: map[string]string{"policy.gpuext.io/contaner.x": "batch"}}, "policy.gpuext.io/contaner.x", ErrUnknownKey, "unknown key suffix"},
		{"empty container name", Request{PodAnnotations: map[string]string{"policy.gpuext.io/container.": "batch"}}, "policy.gpuext.io/container.", ErrUnknownKey, "/container.NAME"},
		{"slash in container name", Request{Labels: map[string]string{"policy.gpuext.io/container.a/b": "batch"}}, "policy.gpuext.io/container.a/b", ErrUnknownKey, "unknown key suffix"},
		{"bare domain", Request{PodAnnotations: map[string]string{"gpuext.io/policy": "batch"}}, "gpuext.io/policy", ErrUnknownKey, "unknown key"},
		{"upper-case domain", Request{Labels: map[string]string{"Policy.GPUEXT.io": "batch"}}, "Policy.GPUEXT.io", ErrUnknownKey, "unknown key"},
		{"typo in another container's key", Request{ContainerName: "web", PodAnnotations: map[string]string{"qouta.gpuext.io/container.db": "1GiB"}},
			"qouta.gpuext.io/container.db", ErrUnknownKey, "unknown key"},
		{"quota policy without quota", Request{Labels: map[string]string{"policy.gpuext.io": "quota"}}, "quota.gpuext.io", ErrMissingParam, "policy.gpuext.io"},
		{"quota policy with zero quota", Request{Labels: map[string]string{"policy.gpuext.io": "quota", "quota.gpuext.io": "0"}}, "quota.gpuext.io", ErrBadValue, "non-zero quota"},
		{"tenant-quota override without quota", Request{Labels: map[string]string{"eviction.gpuext.io": "tenant-quota"}}, "eviction.gpuext.io", ErrBadValue, "non-zero quota"},
		{"bad class", Request{Annotations: map[string]string{"priority.gpuext.io": "urgent"}}, "priority.gpuext.io", ErrBadValue, `unknown priority class "urgent"`},
		{"unknown eviction", Request{Annotations: map[string]string{"eviction.gpuext.io": "lruu"}}, "eviction.gpuext.io", ErrBadValue, `unknown eviction policy "lruu"`},
		{"param of another algorithm", Request{Annotations: map[string]string{"eviction.gpuext.io": "lru:decay=3"}}, "eviction.gpuext.io", ErrBadValue, `no parameter "decay"`},
		{"param out of range", Request{Annotations: map[string]string{"prefetch.gpuext.io": "tree-threshold:threshold=0"}}, "prefetch.gpuext.io", ErrBadValue, "out of range 1..100"},
		{"param syntax", Request{Annotations: map[string]string{"prefetch.gpuext.io": "stride:stride"}}, "prefetch.gpuext.io", ErrBadValue, "PARAM=VALUE"},
		{"lfu decay out of range", Request{Annotations: map[string]string{"eviction.gpuext.io": "lfu:decay=101"}}, "eviction.gpuext.io", ErrBadValue, "decay: 101 is out of range 1..100"},
		{"priority weight zero", Request{Labels: map[string]string{"eviction.gpuext.io": "priority-weighted:weight=0"}}, "eviction.gpuext.io", ErrBadValue, "weight: 0 is out of range 1..100"},
		{"freq-decay period past the ring", Request{Annotations: map[string]string{"eviction.gpuext.io": "freq-decay:period=17"}}, "eviction.gpuext.io", ErrBadValue, "period: 17 is out of range 1..16"},
		{"freq-decay lfu's param", Request{Annotations: map[string]string{"eviction.gpuext.io": "freq-decay:decay=50"}}, "eviction.gpuext.io", ErrBadValue, `no parameter "decay" (want period)`},
		{"lfu param typo", Request{Annotations: map[string]string{"eviction.gpuext.io": "lfu:decy=20"}}, "eviction.gpuext.io", ErrBadValue, `no parameter "decy" (want decay)`},
		{"timeslice no unit", Request{Labels: map[string]string{"timeslice.gpuext.io": "2"}}, "timeslice.gpuext.io", ErrBadValue, "duration"},
		{"timeslice too long", Request{Labels: map[string]string{"timeslice.gpuext.io": "11s"}}, "timeslice.gpuext.io", ErrBadValue, "at most 10s"},
		{"timeslice zero", Request{Labels: map[string]string{"timeslice.gpuext.io": "0s"}}, "timeslice.gpuext.io", ErrBadValue, "above 0"},
		{"timeslice ns", Request{Labels: map[string]string{"timeslice.gpuext.io": "1500ns"}}, "timeslice.gpuext.io", ErrBadValue, "whole microseconds"},
		{"interleave range", Request{Labels: map[string]string{"interleave.gpuext.io": "65"}}, "interleave.gpuext.io", ErrBadValue, "1..64"},
		{"probe name", Request{Labels: map[string]string{"probes.gpuext.io": "ok,Not_OK"}}, "probes.gpuext.io", ErrBadValue, `"Not_OK"`},
		{"unknown probe", Request{ContainerName: "web", PodAnnotations: map[string]string{"probes.gpuext.io/container.web": "launch-stats,launch-counts"}},
			"probes.gpuext.io/container.web", ErrBadValue, `probes[1]: unknown probe "launch-counts" (known: launch-count, launch-latency, launch-stats, sm-histogram)`},
		{"probe value is named", Request{PodLabels: map[string]string{"probes.gpuext.io/pod": "sm-histogramm"}},
			"probes.gpuext.io/pod", ErrBadValue, `probes.gpuext.io/pod="sm-histogramm"`},
		{"too many probes", Request{Labels: map[string]string{"probes.gpuext.io": "a,b,c,d,e,f,g,h,i"}}, "probes.gpuext.io", ErrBadValue, "at most 8"},
		{"tenant", Request{Labels: map[string]string{"tenant.gpuext.io": "namespace"}}, "tenant.gpuext.io", ErrBadValue, `"container" or "pod"`},
		{"probe kernels without probes", Request{Labels: map[string]string{"probe-kernels.gpuext.io": "_Z4vaddPKfS0_Pfi"}},
			"probe-kernels.gpuext.io", ErrBadValue, `probe-kernels.gpuext.io="_Z4vaddPKfS0_Pfi": kernels to probe need device probes (probes.gpuext.io): policy "default" selects no device probes`},
		{"probe kernels with probes cleared", Request{ContainerName: "web", PodAnnotations: map[string]string{"policy.gpuext.io": "batch",
			"probes.gpuext.io/container.web": "", "probe-kernels.gpuext.io/pod": "k"}},
			"probe-kernels.gpuext.io/pod", ErrBadValue, "(probes.gpuext.io): probes.gpuext.io/container.web selects none"},
		{"probe kernel starts with a digit", Request{Labels: map[string]string{"probes.gpuext.io": "launch-stats", "probe-kernels.gpuext.io": "ok,4vadd"}},
			"probe-kernels.gpuext.io", ErrBadValue, `kernel name "4vadd" is not a PTX identifier`},
		{"probe kernel with a bad character", Request{ContainerName: "web", Annotations: map[string]string{"probes.gpuext.io": "launch-stats",
			"probe-kernels.gpuext.io/container.web": "vadd(float*)"}},
			"probe-kernels.gpuext.io/container.web", ErrBadValue, `probe-kernels.gpuext.io/container.web="vadd(float*)": kernel name "vadd(float*)"`},
		{"probe kernel with a space inside", Request{Labels: map[string]string{"probes.gpuext.io": "launch-stats", "probe-kernels.gpuext.io": "a b"}},
			"probe-kernels.gpuext.io", ErrBadValue, `kernel name "a b"`},
		{"probe kernel empty item", Request{Labels: map[string]string{"probes.gpuext.io": "launch-stats", "probe-kernels.gpuext.io": "a,,b"}},
			"probe-kernels.gpuext.io", ErrBadValue, "kernel 2 of 3 is empty"},
		{"probe kernel twice", Request{PodLabels: map[string]string{"probes.gpuext.io": "launch-stats", "probe-kernels.gpuext.io/pod": "a, a"}},
			"probe-kernels.gpuext.io/pod", ErrBadValue, `kernel "a" listed twice`},
		{"too many probe kernels", Request{Labels: map[string]string{"probes.gpuext.io": "launch-stats", "probe-kernels.gpuext.io": kernelList(65, 8)}},
			"probe-kernels.gpuext.io", ErrBadValue, "65 kernels, at most 64"},
		{"probe kernel too long", Request{Labels: map[string]string{"probes.gpuext.io": "launch-stats", "probe-kernels.gpuext.io": "a," + kernelList(1, 513)}},
			"probe-kernels.gpuext.io", ErrBadValue, "kernel 2 is 513 bytes long, at most 512"},
		{"probe kernels typo key", Request{Labels: map[string]string{"probe-kernel.gpuext.io": "a"}}, "probe-kernel.gpuext.io", ErrUnknownKey, `did you mean "probe-kernels.gpuext.io"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cat.Select(tc.req)
			var ke *KeyError
			if !errors.As(err, &ke) {
				t.Fatalf("error %v is not a *KeyError", err)
			}
			if ke.Key != tc.key {
				t.Errorf("Key = %q, want %q", ke.Key, tc.key)
			}
			if !errors.Is(err, tc.sentinel) {
				t.Errorf("error %v does not wrap %v", err, tc.sentinel)
			}
			if !strings.Contains(err.Error(), tc.key) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not name the key %q and say %q", err, tc.key, tc.msg)
			}
		})
	}
}

// The summary (gpuextctl policies, the demo's table) names the launch gate
// where it applies: a best-effort policy that asks for it, not another class.
func TestSummaryNamesTheLaunchGate(t *testing.T) {
	batch, ok := BuiltinCatalog().Get("batch")
	if !ok {
		t.Fatal("no built-in batch")
	}
	if s := batch.Summary(); strings.Contains(s, "launch-gate") {
		t.Errorf("batch without launchGate: %q", s)
	}
	batch.Priority.LaunchGate = true
	if s := batch.Summary(); !strings.HasSuffix(s, " mps-priority=1 launch-gate") {
		t.Errorf("batch with launchGate: %q, want it after mps-priority", s)
	}
	batch.Priority.Class = Standard
	if s := batch.Summary(); strings.Contains(s, "launch-gate") {
		t.Errorf("a standard policy with launchGate: %q names the gate", s)
	}
}
