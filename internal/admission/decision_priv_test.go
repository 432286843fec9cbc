package admission_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/bpf/bpftest"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/cgroup/cgrouptest"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/lib/testutil"
	"github.com/gpuext/gpuext/policies"
)

type coreLab struct {
	core     *admission.Core
	reg      *bpf.Registry
	res      *cgroup.Resolver
	stateDir string
	parent   string // a test cgroup (v2 dir)
	rel      string // its path relative to the v2 root
	log      *strings.Builder
}

func newCoreLab(t *testing.T, mode admission.FailMode) *coreLab {
	t.Helper()
	return newCoreLabIn(t, mode, t.TempDir())
}

// newCoreLabIn is newCoreLab with the state dir given (a small tmpfs, as
// the host's /run is).
func newCoreLabIn(t *testing.T, mode admission.FailMode, stateDir string, tune ...func(*admission.Config)) *coreLab {
	t.Helper()
	testutil.UnmountUnder(t, stateDir) // the tenants' accounting dirs
	reg, _ := bpftest.Registry(t)
	res, err := cgroup.NewResolver("/")
	if err != nil {
		t.Fatal(err)
	}
	lg := logrus.New()
	l := &coreLab{reg: reg, res: res, stateDir: stateDir, log: &strings.Builder{}}
	lg.SetOutput(l.log)
	cfg := admission.Config{FailMode: mode, StateDir: l.stateDir, DevrtDir: t.TempDir()}
	for _, f := range tune {
		f(&cfg)
	}
	l.core, err = admission.New(cfg, reg, policies.BuiltinCatalog(), nil, res, logrus.NewEntry(lg))
	if err != nil {
		t.Fatal(err)
	}
	l.parent, _ = cgrouptest.New(t)
	l.rel = "/" + strings.TrimPrefix(strings.TrimPrefix(l.parent, res.V2Root()), "/")
	return l
}

// cgroup makes a child cgroup and returns its cgroupsPath.
func (l *coreLab) cgroup(t *testing.T, name string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(l.parent, name), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(filepath.Join(l.parent, name)) })
	return l.rel + "/" + name
}

// TestRegisterAppliesTheDecision: registration uses the decision Admit made
// and never selects again (changed annotations at register time change
// nothing); a decision that no longer matches the registry, or that names
// another container's tenant, is refused with both values in the error.
func TestRegisterAppliesTheDecision(t *testing.T) {
	l := newCoreLab(t, admission.FailClosed)
	info := admission.ContainerInfo{ID: "c1", Name: "c1", Runtime: bpf.RuntimeRuncWrapper,
		Annotations: map[string]string{"policy.gpuext.io": "latency-critical"}, CgroupsPath: l.cgroup(t, "c1")}
	d, err := l.core.Admit(info)
	if err != nil {
		t.Fatal(err)
	}
	enc := d.Encode()
	hookInfo := info
	hookInfo.Runtime = bpf.RuntimeOCIHook
	hookInfo.Annotations = map[string]string{admission.AnnotationDecision: enc} // the hook sees no labels
	got, cg, err := l.core.RegisterOCI(hookInfo)
	if err != nil || got.Skipped {
		t.Fatalf("RegisterOCI: %v %+v", err, got)
	}
	tn, err := l.reg.Lookup(cg.ID)
	if err != nil || tn.Policy != "latency-critical" || tn.ID != d.Tenant {
		t.Fatalf("registered %+v (%v), want tenant %d with latency-critical (the wrapper's decision)", tn, err, d.Tenant)
	}

	// The registry changed under the decision: refused, both digests named.
	stale := d
	stale.ConfigDigest = "0123456789abcdef01234567"
	_, _, err = l.core.Register(hookInfo, stale)
	if !errors.Is(err, admission.ErrRefused) || !errors.Is(err, admission.ErrDecisionMismatch) ||
		!strings.Contains(err.Error(), stale.ConfigDigest) || !strings.Contains(err.Error(), d.ConfigDigest) {
		t.Fatalf("stale decision: %v; want a refusal naming both config digests", err)
	}
	// A decision copied from another container: its key is not ours.
	other := hookInfo
	other.ID = "c2"
	other.CgroupsPath = l.cgroup(t, "c2")
	_, _, err = l.core.RegisterOCI(other)
	if !errors.Is(err, admission.ErrDecisionForged) || !strings.Contains(err.Error(), `"oci/ctr/c1"`) {
		t.Fatalf("copied decision: %v; want a forged decision naming the decision's key", err)
	}
	// A malformed annotation is an error of its own (strict: refused).
	other.Annotations = map[string]string{admission.AnnotationDecision: `{"tenant":1,"x":2}`}
	if _, _, err := l.core.RegisterOCI(other); !errors.Is(err, admission.ErrRefused) || !strings.Contains(err.Error(), admission.AnnotationDecision) {
		t.Fatalf("malformed decision: %v", err)
	}
}

// TestPodTenantRefusesPerContainerSettings: the second container of a pod
// tenant asking for another quota neither changes the pod's tenant nor
// joins it: strict refuses it naming tenant.gpuext.io; fail-open gives it
// the default policy in a tenant of its own.
// TestForgedDecisionRefused: on the hook-only path (podman's hooks.d, no
// wrapper) a decision annotation is whatever the container's creator wrote:
// {"skipped":true} skipped admission, strict mode and the constraints. Only
// a decision whose MAC shows the agent made it for this container is
// applied; any other is refused in strict mode, and in fail-open mode the
// container is admitted as if it had none; both are logged.
func TestForgedDecisionRefused(t *testing.T) {
	forged := map[string]string{
		"skipped":   `{"skipped":true}`,
		"malformed": `{"tenant":1,"x":2}`,
		"unsigned":  `{"tenant":1,"tenantKey":"oci/pod/prod/p/uid","policy":"latency-critical","configDigest":"0123456789abcdef01234567"}`,
		"bad mac":   `{"skipped":true,"mac":"00"}`,
	}
	for name, ann := range forged {
		t.Run(name, func(t *testing.T) {
			// strict: refused, the error names the annotation; nothing registered
			l := newCoreLab(t, admission.FailClosed)
			info := admission.ContainerInfo{ID: "c1", Name: "c1", Runtime: bpf.RuntimeOCIHook, CgroupsPath: l.cgroup(t, "c1"),
				Annotations: map[string]string{admission.AnnotationDecision: ann, "policy.gpuext.io": "batch"}}
			_, _, err := l.core.RegisterOCI(info)
			if !errors.Is(err, admission.ErrRefused) || !errors.Is(err, admission.ErrDecisionForged) ||
				!strings.Contains(err.Error(), admission.AnnotationDecision) {
				t.Fatalf("strict, forged decision: %v; want a refusal naming %s", err, admission.AnnotationDecision)
			}
			if ts, _ := l.reg.List(); len(ts) != 0 {
				t.Fatalf("strict: a refused container left tenants %+v", ts)
			}
			if !strings.Contains(l.log.String(), admission.AnnotationDecision) {
				t.Fatalf("strict: the refusal is not logged with the annotation:\n%s", l.log)
			}

			// fail-open: the container gets what its own keys ask, as if the
			// annotation were not there (not skipped), and it is logged
			l = newCoreLab(t, admission.FailOpen)
			info.CgroupsPath = l.cgroup(t, "c1")
			d, cg, err := l.core.RegisterOCI(info)
			if err != nil || d.Skipped {
				t.Fatalf("fail-open, forged decision: %+v %v; want the container admitted", d, err)
			}
			tn, err := l.reg.Lookup(cg.ID)
			if err != nil || tn.Policy != "batch" {
				t.Fatalf("fail-open: registered %+v (%v); want the container's own policy batch", tn, err)
			}
			if !strings.Contains(l.log.String(), "forged decision annotation ignored") {
				t.Fatalf("fail-open: the forged annotation is not logged:\n%s", l.log)
			}
		})
	}
}

func TestPodTenantRefusesPerContainerSettings(t *testing.T) {
	for _, mode := range []admission.FailMode{admission.FailClosed, admission.FailOpen} {
		t.Run(string(mode), func(t *testing.T) {
			l := newCoreLab(t, mode)
			pod := func(id, quota string) admission.ContainerInfo {
				return admission.ContainerInfo{ID: id, Name: id, PodName: "p", PodNamespace: "ns", PodUID: "uid-1",
					Runtime: bpf.RuntimeNRI, PodAnnotations: map[string]string{"tenant.gpuext.io/pod": "pod"},
					Annotations: map[string]string{"policy.gpuext.io": "quota", "quota.gpuext.io": quota}}
			}
			first, err := l.core.Admit(pod("a", "8GiB"))
			if err != nil || first.TenantKey != "nri/pod/uid-1" {
				t.Fatalf("first container: %+v, %v", first, err)
			}
			second, err := l.core.Admit(pod("b", "64GiB"))
			switch mode {
			case admission.FailClosed:
				if !errors.Is(err, admission.ErrRefused) || !strings.Contains(err.Error(), policies.KeyTenant) {
					t.Fatalf("strict: %v; want a refusal naming %s", err, policies.KeyTenant)
				}
			case admission.FailOpen:
				if err != nil || second.TenantKey != "nri/ctr/b" || second.Policy.Name != "default" || second.RequestErr == nil {
					t.Fatalf("fail-open: %+v, %v; want the default policy in the container's own tenant", second, err)
				}
			}
			tn, err := l.reg.TenantRecord(first.Tenant)
			if err != nil || tn.Config.QuotaBytes != 8<<30 {
				t.Fatalf("the pod's tenant: %+v, %v; want its 8GiB quota kept", tn, err)
			}
		})
	}
}

// TestCollectionNeverRemovesAnAdmittedDir: Remove (which collects tenant
// directories) runs concurrently with Admit; every admitted container keeps
// its tenant and accounting directories.
func TestCollectionNeverRemovesAnAdmittedDir(t *testing.T) {
	l := newCoreLab(t, admission.FailClosed)
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	ids := make([]bpf.TenantID, n)
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			d, err := l.core.Admit(admission.ContainerInfo{ID: fmt.Sprintf("keep-%d", i), Runtime: bpf.RuntimeRuncWrapper})
			if err != nil {
				errs <- err
			}
			ids[i] = d.Tenant
		}()
		go func() {
			defer wg.Done()
			gone := admission.ContainerInfo{ID: fmt.Sprintf("gone-%d", i), Runtime: bpf.RuntimeRuncWrapper}
			if _, err := l.core.Admit(gone); err != nil {
				errs <- err
			}
			if err := l.core.Remove(gone); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	lost := 0
	for i, id := range ids {
		for _, dir := range []string{admission.TenantDir(l.stateDir, uint64(id)), admission.AcctDir(l.stateDir, uint64(id))} {
			if _, err := os.Stat(dir); err != nil {
				lost++
				if lost < 5 {
					t.Errorf("keep-%d (tenant %d): %v", i, id, err)
				}
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d directories of %d admitted containers were removed by a concurrent collection", lost, n)
	}
	st, err := os.Stat(filepath.Join(l.stateDir, "acct"))
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("acct root %v (%v): want 0700, host users must not reach tenants' files", st.Mode(), err)
	}
}

// TestReconcileFreesOrphansAndKeepsLongPaths: a tenant id whose key was
// never mapped (its writer killed mid-reserve) is freed by reconcile; a live
// container whose cgroup path is longer than the registry's path field stays.
func TestReconcileFreesOrphansAndKeepsLongPaths(t *testing.T) {
	l := newCoreLab(t, admission.FailClosed)
	long := strings.Repeat("x", 150) + "/" + strings.Repeat("y", 150)
	info := admission.ContainerInfo{ID: "long", Name: "long", Runtime: bpf.RuntimeOCIHook, CgroupsPath: l.cgroup(t, long)}
	t.Cleanup(func() { os.Remove(filepath.Join(l.parent, strings.Repeat("x", 150))) })
	if _, _, err := l.core.RegisterOCI(info); err != nil {
		t.Fatal(err)
	}
	orphan, err := l.reg.Reserve("nri/ctr/killed-mid-reserve", "default", bpf.GpuextTenantConfig{})
	if err != nil {
		t.Fatal(err)
	}
	key := bpf.GpuextTenantKey{}
	for i, c := range []byte("nri/ctr/killed-mid-reserve") {
		key.Key[i] = int8(c)
	}
	if err := l.reg.Maps().TenantKeys.Delete(&key); err != nil { // what the killed writer never wrote
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if _, err := l.core.Reconcile(time.Millisecond, bpf.RuntimeOCIHook, bpf.RuntimeRuncWrapper); err != nil {
		t.Fatal(err)
	}
	if _, err := l.reg.TenantRecord(orphan); !errors.Is(err, bpf.ErrNoTenant) {
		t.Errorf("orphaned tenant %d after reconcile: %v; want it freed", orphan, err)
	}
	d, ok, err := l.core.StoredDecision(info)
	if err != nil || !ok {
		t.Fatalf("the long-path container lost its tenant: %v", err)
	}
	tn, err := l.reg.Tenant(d.Tenant)
	if err != nil || len(tn.Cgroups) != 1 {
		t.Fatalf("the long-path container's cgroup was dropped by reconcile: %+v, %v", tn, err)
	}
}
