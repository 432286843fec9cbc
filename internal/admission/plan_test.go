package admission

import (
	"errors"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/policies"
)

// Planning needs no root: these tests give it a request, a catalog, admin
// constraints, the scheduler's GPU memory and a snapshot of the registry,
// and check the plan a user would see the effect of (the policy, the
// tenant key, the kernel-facing config, the tenant file the device runtime
// reads) or the error, which names the bad key. Applying the plan to a real
// registry is the privileged tests' (decision_priv_test.go and the others).

// gpuGrant is a GPUMemorySource that gives every container the same
// memory, as the device plugin's kubelet records would.
type gpuGrant struct {
	gm  GPUMemory
	err error
}

func (g gpuGrant) GPUMemory(ContainerInfo, bool) (GPUMemory, error) { return g.gm, g.err }

func newPlanner(t *testing.T, mode FailMode, constraints string) (*Planner, *test.Hook) {
	t.Helper()
	var cons *policies.Constraints
	if constraints != "" {
		var err error
		if cons, err = policies.ParseConstraints([]byte(constraints)); err != nil {
			t.Fatal(err)
		}
	}
	logger, hook := test.NewNullLogger()
	pl, err := NewPlanner(mode, policies.BuiltinCatalog(), cons, logrus.NewEntry(logger))
	if err != nil {
		t.Fatal(err)
	}
	return pl, hook
}

func TestPlan(t *testing.T) {
	const gib = 1 << 30
	nri := func(labels, annotations map[string]string) ContainerInfo {
		return ContainerInfo{ID: "c1", Name: "web", PodName: "p", PodNamespace: "team-a", PodUID: "u1",
			Runtime: bpf.RuntimeNRI, Labels: labels, Annotations: annotations}
	}
	podOf := func(policy string) TenantState {
		p, _ := policies.BuiltinCatalog().Get(policy)
		return TenantState{ID: 9, Reserved: true, Policy: policy, Config: tenantConfig(p, false)}
	}
	twoGPUs := gpuGrant{gm: GPUMemory{Resource: "gpuext.io/gpu-memory", GPUs: []GPUShare{{GPU: 1, Bytes: 8 * gib}, {GPU: 3, Bytes: 8 * gib}}}}
	for _, tc := range []struct {
		name        string
		mode        FailMode
		constraints string
		info        ContainerInfo
		state       StateMap
		gpus        GPUMemorySource
		// the plan: policy, tenant key, quota, class in the tenant file
		policy, key string
		quota       uint64
		class       string
		gpuQuotas   []uint64
		failedOpen  bool
		// errors: in the plan (fail-open) or returned (strict); each must
		// contain every one of these strings (the key, the value)
		reqErr, err []string
		kind        ErrorKind
	}{
		{name: "no keys: the default policy, the container's own tenant",
			info: nri(nil, nil), policy: "default", key: "nri/ctr/c1", class: "standard"},
		{name: "a label picks the policy",
			info: nri(map[string]string{"policy.gpuext.io": "batch"}, nil), policy: "batch", key: "nri/ctr/c1", class: "best-effort"},
		{name: "annotations over labels, a quota",
			info:   nri(map[string]string{"policy.gpuext.io": "batch"}, map[string]string{"policy.gpuext.io": "quota", "quota.gpuext.io": "2Gi"}),
			policy: "quota", key: "nri/ctr/c1", quota: 2 * gib, class: "standard"},
		{name: "the container's own key over the pod's",
			info:   nri(nil, map[string]string{"policy.gpuext.io/pod": "batch", "policy.gpuext.io/container.web": "latency-critical"}),
			policy: "latency-critical", key: "nri/ctr/c1", class: "latency-critical"},
		{name: "a pod tenant",
			info:   nri(nil, map[string]string{"policy.gpuext.io": "batch", "tenant.gpuext.io": "pod"}),
			policy: "batch", key: "nri/pod/u1", class: "best-effort"},
		{name: "a pod tenant joined with the same settings",
			info:   nri(nil, map[string]string{"policy.gpuext.io": "batch", "tenant.gpuext.io": "pod"}),
			state:  StateMap{"nri/pod/u1": podOf("batch")},
			policy: "batch", key: "nri/pod/u1", class: "best-effort"},
		{name: "strict: unknown policy", mode: FailClosed,
			info: nri(nil, map[string]string{"policy.gpuext.io": "no-such"}),
			err:  []string{"policy.gpuext.io", "no-such"}, kind: KindRequest},
		{name: "fail-open: unknown policy gets the default, the error kept",
			info:   nri(nil, map[string]string{"policy.gpuext.io": "no-such"}),
			policy: "default", key: "nri/ctr/c1", class: "standard", failedOpen: true,
			reqErr: []string{"policy.gpuext.io", "no-such"}, kind: KindRequest},
		{name: "strict: a misspelt key", mode: FailClosed,
			info: nri(nil, map[string]string{"qouta.gpuext.io": "2Gi"}),
			err:  []string{"qouta.gpuext.io"}, kind: KindRequest},
		{name: "strict: a bad size", mode: FailClosed,
			info: nri(nil, map[string]string{"policy.gpuext.io": "quota", "quota.gpuext.io": "lots"}),
			err:  []string{"quota.gpuext.io", "lots"}, kind: KindRequest},
		{name: "strict: the constraints forbid a class", mode: FailClosed,
			constraints: `{"restrictedClasses": ["latency-critical"], "rules": [{"namespaces": ["prod"], "allowClasses": ["latency-critical"]}]}`,
			info:        nri(nil, map[string]string{"policy.gpuext.io": "latency-critical"}),
			err:         []string{"latency-critical"}, kind: KindConstraint},
		{name: "strict: a pod tenant's container asks for other settings", mode: FailClosed,
			info:  nri(nil, map[string]string{"policy.gpuext.io": "batch", "tenant.gpuext.io": "pod"}),
			state: StateMap{"nri/pod/u1": podOf("latency-critical")},
			err:   []string{"tenant.gpuext.io=pod", `policy "batch"`, `tenant 9 has policy "latency-critical"`}, kind: KindRequest},
		{name: "fail-open: a pod tenant's odd container gets its own default tenant",
			info:   nri(nil, map[string]string{"policy.gpuext.io": "batch", "tenant.gpuext.io": "pod"}),
			state:  StateMap{"nri/pod/u1": podOf("latency-critical")},
			policy: "default", key: "nri/ctr/c1", class: "standard", failedOpen: true,
			reqErr: []string{"tenant.gpuext.io=pod"}, kind: KindRequest},
		{name: "the scheduler's GPU memory is the quota on each GPU",
			info: nri(nil, nil), gpus: twoGPUs,
			policy: "default", key: "nri/ctr/c1", class: "standard", quota: 8 * gib, gpuQuotas: []uint64{8 * gib, 8 * gib}},
		{name: "a quota key lowers it",
			info: nri(nil, map[string]string{"policy.gpuext.io": "quota", "quota.gpuext.io": "3Gi"}), gpus: twoGPUs,
			policy: "quota", key: "nri/ctr/c1", class: "standard", quota: 3 * gib, gpuQuotas: []uint64{3 * gib, 3 * gib}},
		{name: "strict: a quota key never raises it", mode: FailClosed,
			info: nri(nil, map[string]string{"policy.gpuext.io": "quota", "quota.gpuext.io": "12Gi"}), gpus: twoGPUs,
			err: []string{"quota.gpuext.io", "12Gi", "never raise"}, kind: KindRequest},
		{name: "fail-open: a quota above the grant keeps the grant",
			info: nri(nil, map[string]string{"policy.gpuext.io": "quota", "quota.gpuext.io": "12Gi"}), gpus: twoGPUs,
			policy: "default", key: "nri/ctr/c1", class: "standard", quota: 8 * gib, gpuQuotas: []uint64{8 * gib, 8 * gib},
			failedOpen: true, reqErr: []string{"quota.gpuext.io"}, kind: KindRequest},
		{name: "a pod tenant whose GPUs differ", mode: FailClosed,
			info: nri(nil, map[string]string{"tenant.gpuext.io": "pod"}), gpus: twoGPUs,
			state: StateMap{"nri/pod/u1": {ID: 9, File: &tenantcfg.File{GPUs: []int{1, 3}, GPUQuotaBytes: []uint64{4 * gib, 4 * gib}}}},
			err:   []string{"tenant.gpuext.io=pod", "GPU quotas", "tenant 9"}, kind: KindRequest},
		{name: "strict: the GPU memory lookup fails", mode: FailClosed,
			info: nri(nil, nil), gpus: gpuGrant{err: errors.New("kubelet pod-resources: connection refused")},
			err: []string{"gpu memory of container \"web\" of pod team-a/p", "connection refused"}, kind: KindInternal},
		{name: "no container id", mode: FailClosed,
			info: ContainerInfo{Name: "web"}, err: []string{"container id is empty"}, kind: KindInternal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl, _ := newPlanner(t, tc.mode, tc.constraints)
			if tc.gpus != nil {
				pl.SetGPUMemory(tc.gpus)
			}
			state := tc.state
			if state == nil {
				state = StateMap{}
			}
			p, err := pl.Plan(tc.info, state)
			if tc.err != nil {
				if err == nil {
					t.Fatalf("planned %s for %s, want an error saying %q", p.Selection.Policy.Name, p.TenantKey, tc.err)
				}
				for _, s := range tc.err {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				if KindOf(err) != tc.kind {
					t.Errorf("error kind %s, want %s", KindOf(err), tc.kind)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Selection.Policy.Name != tc.policy || p.TenantKey != tc.key || p.FailedOpen != tc.failedOpen {
				t.Errorf("plan: policy %q key %q failedOpen %v, want %q %q %v", p.Selection.Policy.Name, p.TenantKey, p.FailedOpen,
					tc.policy, tc.key, tc.failedOpen)
			}
			for _, s := range tc.reqErr {
				if p.RequestErr == nil || !strings.Contains(p.RequestErr.Error(), s) {
					t.Errorf("request error %v does not say %q", p.RequestErr, s)
				}
			}
			if tc.reqErr == nil && p.RequestErr != nil {
				t.Errorf("request error %v on a good request", p.RequestErr)
			}
			if tc.reqErr != nil && KindOf(p.RequestErr) != tc.kind {
				t.Errorf("request error kind %s, want %s", KindOf(p.RequestErr), tc.kind)
			}
			// the kernel's view and the device runtime's agree with the plan
			f, cfg := p.File, p.Config
			if f.Policy != tc.policy || f.TenantKey != tc.key || f.QuotaBytes != tc.quota || f.Class != tc.class || f.TenantID != 0 {
				t.Errorf("tenant file: %+v, want policy %q key %q quota %d class %q and no tenant id yet", f, tc.policy, tc.key, tc.quota, tc.class)
			}
			if cfg.QuotaBytes != tc.quota || cfg.PriorityClass != uint32(priorityIDs[policies.PriorityClass(tc.class)]) {
				t.Errorf("tenant config: quota %d class %d, want %d %q", cfg.QuotaBytes, cfg.PriorityClass, tc.quota, tc.class)
			}
			if failOpenFlag := cfg.Flags&uint32(bpf.TenantFlagFailOpen) != 0; failOpenFlag != tc.failedOpen {
				t.Errorf("tenant config fail-open flag %v, want %v", failOpenFlag, tc.failedOpen)
			}
			if p.ConfigDigest != configDigest(tc.policy, cfg) {
				t.Errorf("config digest %s is not the config's", p.ConfigDigest)
			}
			if s := f.Settings(); s.QuotaBytes != tc.quota || s.Class != tenantcfg.ClassOf(policies.PriorityClass(tc.class)) ||
				len(s.DeviceQuotas) != len(tc.gpuQuotas) {
				t.Errorf("settings.bin: %+v, want quota %d class %q device quotas %v", s, tc.quota, tc.class, tc.gpuQuotas)
			}
			for i, q := range tc.gpuQuotas {
				if i >= len(f.GPUQuotaBytes) || f.GPUQuotaBytes[i] != q {
					t.Errorf("per-GPU quotas %v, want %v", f.GPUQuotaBytes, tc.gpuQuotas)
					break
				}
			}
		})
	}
}

// Planning reads the registry only through State, and an error reading it
// is not taken for a good request: fail-open plans the default policy and
// says why, strict returns the error.
func TestPlanStateError(t *testing.T) {
	info := ContainerInfo{ID: "c1", Name: "web", PodName: "p", PodUID: "u1", Runtime: bpf.RuntimeNRI,
		Annotations: map[string]string{"policy.gpuext.io": "batch", "tenant.gpuext.io": "pod"}}
	broken := stateFunc(func(string) (TenantState, bool, error) {
		return TenantState{}, false, errors.New("registry: map lookup failed")
	})
	pl, _ := newPlanner(t, FailClosed, "")
	if _, err := pl.Plan(info, broken); err == nil || !strings.Contains(err.Error(), "map lookup failed") {
		t.Errorf("strict: %v, want the registry's error", err)
	}
	pl, hook := newPlanner(t, FailOpen, "")
	p, err := pl.Plan(info, broken)
	if err != nil || p.Selection.Policy.Name != "default" || p.TenantKey != "nri/ctr/c1" || !p.FailedOpen {
		t.Errorf("fail-open: %+v, %v; want the default policy in the container's own tenant", p, err)
	}
	if e := hook.LastEntry(); e == nil || e.Level != logrus.WarnLevel || e.Data["container"] != "c1" {
		t.Errorf("fail-open logged %+v, want a warning naming the container", e)
	}
}

type stateFunc func(string) (TenantState, bool, error)

func (f stateFunc) Tenant(key string) (TenantState, bool, error) { return f(key) }
