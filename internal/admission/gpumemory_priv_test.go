package admission_test

// A Kubernetes container's GPU memory request becomes its tenant's quota,
// per GPU, from the kubelet's pod-resources API (a test server of the real
// podresources v1 service): an annotation may lower it, never raise it
// (the fail mode decides what a raise does), and nothing the pod writes
// about itself (env, annotations) changes it.

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/bpf/bpftest"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/cgroup/cgrouptest"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/deviceplugin"
	"github.com/gpuext/gpuext/internal/deviceplugin/deviceplugintest"
	"github.com/gpuext/gpuext/internal/deviceplugin/pools"
	"github.com/gpuext/gpuext/lib/testutil"
	"github.com/gpuext/gpuext/policies"
)

const gib = 1 << 30

type gpuLab struct {
	core     *admission.Core
	stateDir string
	kubelet  *deviceplugintest.PodResourcesServer
}

// newGPULab: a core whose GPU memory comes from the pod-resources API of a
// test kubelet on a node of two 48 GiB GPUs in 1 GiB units. Without a
// kubelet (noKubelet) the socket is missing.
func newGPULab(t *testing.T, mode admission.FailMode, noKubelet bool) *gpuLab {
	t.Helper()
	reg, _ := bpftest.Registry(t)
	res, err := cgroup.NewResolver("/")
	if err != nil {
		t.Fatal(err)
	}
	dir := deviceplugintest.KubeletDir(t)
	l := &gpuLab{stateDir: t.TempDir()}
	testutil.UnmountUnder(t, l.stateDir)
	if !noKubelet {
		l.kubelet = deviceplugintest.ServePodResources(t, dir)
	}
	spec, err := pools.Config{KubeletDir: dir, GPUs: []pools.GPUConfig{{Memory: "48GiB"}, {Memory: "48GiB"}}}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	pr, err := deviceplugin.NewPodResources(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.Close() })
	lg := logrus.New()
	lg.SetOutput(&strings.Builder{})
	l.core, err = admission.New(admission.Config{FailMode: mode, StateDir: l.stateDir, DevrtDir: t.TempDir()},
		reg, policies.BuiltinCatalog(), nil, res, logrus.NewEntry(lg))
	if err != nil {
		t.Fatal(err)
	}
	l.core.SetGPUMemory(pr)
	return l
}

func units(gpu, from, to int) []string {
	var out []string
	for u := from; u < to; u++ {
		out = append(out, pools.DeviceID{GPU: gpu, Unit: u}.String())
	}
	return out
}

const resource = "gpuext.io/gpu-memory"

func podInfo(ctr string, podAnn map[string]string) admission.ContainerInfo {
	return admission.ContainerInfo{ID: "id-" + ctr, Name: ctr, PodName: "train", PodNamespace: "ml", PodUID: "uid-train",
		PodAnnotations: podAnn, Runtime: bpf.RuntimeNRI}
}

// tenant reads what the device runtime and people see of a decision's tenant.
func (l *gpuLab) tenant(t *testing.T, d admission.Decision) (tenantcfg.File, tenantcfg.Settings) {
	t.Helper()
	dir := admission.TenantDir(l.stateDir, uint64(d.Tenant))
	var tf tenantcfg.File
	data, err := os.ReadFile(filepath.Join(dir, tenantcfg.ConfigFileName))
	if err == nil {
		err = json.Unmarshal(data, &tf)
	}
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(filepath.Join(dir, tenantcfg.FileName))
	if err != nil {
		t.Fatal(err)
	}
	s, err := tenantcfg.Decode(bin)
	if err != nil {
		t.Fatal(err)
	}
	return tf, s
}

func wantQuota(t *testing.T, l *gpuLab, d admission.Decision, gpus []int, quotas []uint64) {
	t.Helper()
	tf, s := l.tenant(t, d)
	most := uint64(0)
	for _, q := range quotas {
		most = max(most, q)
	}
	if !slices.Equal(tf.GPUs, gpus) || !slices.Equal(tf.GPUQuotaBytes, quotas) || tf.QuotaBytes != most ||
		!slices.Equal(s.DeviceQuotas, quotas) || s.QuotaBytes != most {
		t.Fatalf("tenant %d: config.json gpus %v quotas %v quota %d, settings.bin %v %d; want gpus %v quotas %v",
			d.Tenant, tf.GPUs, tf.GPUQuotaBytes, tf.QuotaBytes, s.DeviceQuotas, s.QuotaBytes, gpus, quotas)
	}
}

func TestRequestBecomesTheQuota(t *testing.T) {
	for _, mode := range []admission.FailMode{admission.FailClosed, admission.FailOpen} {
		t.Run(string(mode), func(t *testing.T) {
			l := newGPULab(t, mode, false)
			l.kubelet.SetPods(deviceplugintest.Pod("ml", "train", map[string]map[string][]string{
				"trainer": {resource: units(1, 0, 2)}, "lowered": {resource: units(0, 0, 8)},
				"raised": {resource: units(0, 8, 10)}, "forger": {resource: units(1, 2, 3)},
				"split": {resource: append(units(0, 10, 13), units(1, 3, 4)...)}, "none": {}}))

			d, err := l.core.Admit(podInfo("trainer", nil))
			if err != nil || d.Policy.Name != "default" {
				t.Fatalf("admit: %+v %v", d, err)
			}
			wantQuota(t, l, d, []int{1}, []uint64{2 * gib})

			// an annotation lowers it
			d, err = l.core.Admit(podInfo("lowered", map[string]string{"quota.gpuext.io/container.lowered": "4GiB"}))
			if err != nil {
				t.Fatal(err)
			}
			wantQuota(t, l, d, []int{0}, []uint64{4 * gib})

			// units on two GPUs: a quota per GPU, the annotation applies to each
			d, err = l.core.Admit(podInfo("split", map[string]string{"quota.gpuext.io/container.split": "1GiB"}))
			if err != nil {
				t.Fatal(err)
			}
			wantQuota(t, l, d, []int{0, 1}, []uint64{1 * gib, 1 * gib})

			// an annotation cannot raise it
			d, err = l.core.Admit(podInfo("raised", map[string]string{"quota.gpuext.io/container.raised": "16GiB"}))
			want := `quota.gpuext.io/container.raised="16GiB": above the 2GiB of gpuext.io/gpu-memory given on GPU 0`
			if mode == admission.FailClosed {
				if !errors.Is(err, admission.ErrRefused) || !strings.Contains(err.Error(), want) {
					t.Fatalf("strict: err = %v, want refused with %q", err, want)
				}
			} else {
				if err != nil || d.RequestErr == nil || !strings.Contains(d.RequestErr.Error(), want) || d.Policy.Name != "default" ||
					admission.KindOf(d.RequestErr) != admission.KindRequest || !d.FailedOpen {
					t.Fatalf("fail-open: %+v %v, want the default policy and the keyed error %q", d, err, want)
				}
				wantQuota(t, l, d, []int{0}, []uint64{2 * gib}) // the request still holds
			}

			// what the pod writes about itself changes nothing
			forged := podInfo("forger", map[string]string{"nvidia.com/gpumem": "81920", "resources.gpu-memory": "48"})
			forged.Env = []string{"CUDA_VISIBLE_DEVICES=0,1", "NVIDIA_VISIBLE_DEVICES=all", "GPUEXT_TENANT_QUOTA=48GiB"}
			forged.Labels = map[string]string{"gpu-memory": "48"}
			d, err = l.core.Admit(forged)
			if err != nil {
				t.Fatal(err)
			}
			wantQuota(t, l, d, []int{1}, []uint64{1 * gib})

			// no request: as before the device plugin (the policy's quota, if any)
			d, err = l.core.Admit(podInfo("none", map[string]string{"quota.gpuext.io/container.none": "8GiB"}))
			if err != nil {
				t.Fatal(err)
			}
			if tf, s := l.tenant(t, d); tf.QuotaBytes != 8*gib || len(tf.GPUs) != 0 || len(s.DeviceQuotas) != 0 || s.QuotaBytes != 8*gib {
				t.Fatalf("no request: %+v / %+v, want the annotation's 8GiB on every GPU", tf, s)
			}

			// the OCI paths (Docker, podman) have no kubelet to ask
			calls := l.kubelet.Calls
			if _, err := l.core.Admit(admission.ContainerInfo{ID: "docker1", Name: "docker1", Runtime: bpf.RuntimeRuncWrapper}); err != nil {
				t.Fatal(err)
			}
			if l.kubelet.Calls != calls {
				t.Fatal("admission asked the kubelet about a Docker container")
			}
		})
	}
}

// A pod tenant's quota is its pod's request (each device once); a container
// given other GPUs than its pod's is refused under the pod-tenant rule.
func TestPodTenantQuotaIsThePodsRequest(t *testing.T) {
	l := newGPULab(t, admission.FailClosed, false)
	l.kubelet.SetPods(deviceplugintest.Pod("ml", "train", map[string]map[string][]string{
		"a": {resource: units(1, 0, 2)}, "b": {resource: units(1, 2, 3)}, "c": {}}))
	pod := map[string]string{"tenant.gpuext.io/pod": "pod"}
	var tenants []bpf.TenantID
	for _, c := range []string{"a", "b", "c"} {
		d, err := l.core.Admit(podInfo(c, pod))
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		wantQuota(t, l, d, []int{1}, []uint64{3 * gib})
		tenants = append(tenants, d.Tenant)
	}
	if tenants[0] != tenants[1] || tenants[1] != tenants[2] {
		t.Fatalf("one pod, tenants %v", tenants)
	}

	l2 := newGPULab(t, admission.FailClosed, false)
	l2.kubelet.SetPods(deviceplugintest.Pod("ml", "train", map[string]map[string][]string{
		"a": {resource: units(1, 0, 2)}, "b": {resource: units(0, 0, 1)}}))
	_, err := l2.core.Admit(podInfo("b", pod))
	if !errors.Is(err, admission.ErrRefused) || !strings.Contains(err.Error(), "tenant.gpuext.io=pod: this container was given gpuext.io/gpu-memory on GPUs [0], its pod on GPUs [0 1]") {
		t.Fatalf("a pod tenant's containers on different GPUs: %v", err)
	}
}

// The kubelet cannot be asked: an internal error under the fail mode.
func TestNoKubeletIsAnInternalError(t *testing.T) {
	l := newGPULab(t, admission.FailClosed, true)
	_, err := l.core.Admit(podInfo("trainer", nil))
	if !errors.Is(err, admission.ErrRefused) || !errors.Is(err, deviceplugin.ErrPodResources) || admission.KindOf(err) != admission.KindInternal {
		t.Fatalf("strict: %v", err)
	}
	l = newGPULab(t, admission.FailOpen, true)
	d, err := l.core.Admit(podInfo("trainer", nil))
	if err != nil || !d.Skipped || !errors.Is(d.Err, deviceplugin.ErrPodResources) {
		t.Fatalf("fail-open: %+v %v, want a skipped decision", d, err)
	}
}

// TestFailOpenKeepsTheReservation: a pod owner can make the kubelet list
// a pod twice (force-delete it and make it again under the same name); the
// lookup then fails, and fail-open let the container run with no quota at
// all. A container the scheduler gave GPU memory (its device plugin env
// names the GPUs) is never unlimited: fail-open keeps it at the least it
// can have been given on each of its GPUs; strict refuses it. Listings that
// agree are no doubt at all.
func TestFailOpenKeepsTheReservation(t *testing.T) {
	allocated := []string{"CUDA_VISIBLE_DEVICES=1", "NVIDIA_VISIBLE_DEVICES=1", "CUDA_DEVICE_ORDER=PCI_BUS_ID"}
	info := podInfo("trainer", nil)
	info.Env = append([]string{"PATH=/bin"}, allocated...)

	l := newGPULab(t, admission.FailOpen, false)
	l.kubelet.SetPods( // the old pod, terminating, and the new one
		deviceplugintest.Pod("ml", "train", map[string]map[string][]string{"trainer": {resource: units(1, 0, 8)}}),
		deviceplugintest.Pod("ml", "train", map[string]map[string][]string{"trainer": {resource: units(1, 8, 10)}}))
	d, err := l.core.Admit(info)
	if err != nil || d.Skipped || !d.FailedOpen {
		t.Fatalf("fail-open, pod listed twice: %+v %v; want a fail-open decision that is not skipped", d, err)
	}
	wantQuota(t, l, d, []int{1}, []uint64{1 * gib}) // one unit: the least a grant can be

	// the kubelet down: the same
	l = newGPULab(t, admission.FailOpen, true)
	if d, err = l.core.Admit(info); err != nil || d.Skipped {
		t.Fatalf("fail-open, no kubelet: %+v %v; want the container kept at its floor", d, err)
	}
	wantQuota(t, l, d, []int{1}, []uint64{1 * gib})

	// strict: refused
	l = newGPULab(t, admission.FailClosed, false)
	l.kubelet.SetPods(
		deviceplugintest.Pod("ml", "train", map[string]map[string][]string{"trainer": {resource: units(1, 0, 8)}}),
		deviceplugintest.Pod("ml", "train", map[string]map[string][]string{"trainer": {resource: units(1, 8, 10)}}))
	if _, err := l.core.Admit(info); !errors.Is(err, admission.ErrRefused) || !strings.Contains(err.Error(), "listed 2 times") {
		t.Fatalf("strict, pod listed twice: %v; want a refusal saying so", err)
	}

	// two listings with the same devices: the grant itself
	l = newGPULab(t, admission.FailClosed, false)
	same := deviceplugintest.Pod("ml", "train", map[string]map[string][]string{"trainer": {resource: units(1, 0, 3)}})
	l.kubelet.SetPods(same, same)
	if d, err = l.core.Admit(info); err != nil {
		t.Fatal(err)
	}
	wantQuota(t, l, d, []int{1}, []uint64{3 * gib})
}

// TestSetPolicyKeepsTheReservation: set-policy rebuilt the container from
// the registry, whose pod names are cut to 63 bytes (Kubernetes allows
// 253): the kubelet lookup found nothing and "set-policy default" dropped
// the scheduler's per-GPU quota to unlimited. The tenant keeps what it was
// given, for any valid pod name, and a quota may still lower it.
func TestSetPolicyKeepsTheReservation(t *testing.T) {
	l := newGPULab(t, admission.FailClosed, false)
	long := strings.Repeat("p", 200) // a valid pod name, longer than the registry keeps
	l.kubelet.SetPods(deviceplugintest.Pod("ml", long, map[string]map[string][]string{"trainer": {resource: units(1, 0, 6)}}))
	cg, _ := cgrouptest.New(t)
	info := admission.ContainerInfo{ID: "id-trainer", Name: "trainer", PodName: long, PodNamespace: "ml", PodUID: "uid-long",
		Runtime: bpf.RuntimeNRI, CgroupsPath: cgroupsPath(t, cg), PodAnnotations: map[string]string{"policy.gpuext.io/pod": "batch"}}
	d, err := l.core.Admit(info)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.core.Register(info, d); err != nil {
		t.Fatal(err)
	}
	wantQuota(t, l, d, []int{1}, []uint64{6 * gib})

	nd, err := l.core.SetPolicy(admission.PolicyChange{Tenant: d.TenantKey, Policy: "default"})
	if err != nil {
		t.Fatal(err)
	}
	wantQuota(t, l, nd, []int{1}, []uint64{6 * gib}) // not unlimited

	// lowered, then back to the policy: the grant, not the lowered quota, is the ceiling
	if nd, err = l.core.SetPolicy(admission.PolicyChange{Tenant: d.TenantKey, Policy: "quota", Params: map[string]string{"quota": "2GiB"}}); err != nil {
		t.Fatal(err)
	}
	wantQuota(t, l, nd, []int{1}, []uint64{2 * gib})
	if nd, err = l.core.SetPolicy(admission.PolicyChange{Tenant: d.TenantKey, Policy: "default"}); err != nil {
		t.Fatal(err)
	}
	wantQuota(t, l, nd, []int{1}, []uint64{6 * gib})
	// and never above it
	_, err = l.core.SetPolicy(admission.PolicyChange{Tenant: d.TenantKey, Policy: "quota", Params: map[string]string{"quota": "16GiB"}})
	if err == nil || !strings.Contains(err.Error(), "a quota may lower the request, never raise it") {
		t.Fatalf("set-policy above the grant: %v", err)
	}
}

// cgroupsPath is a cgroup directory's path relative to the v2 root.
func cgroupsPath(t *testing.T, dir string) string {
	t.Helper()
	res, err := cgroup.NewResolver("/")
	if err != nil {
		t.Fatal(err)
	}
	return "/" + strings.TrimPrefix(strings.TrimPrefix(dir, res.V2Root()), "/")
}
