package admission_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/lib/testutil"
	"github.com/gpuext/gpuext/policies"
)

// constrainedLab is a core lab whose admin constraints restrict the
// latency-critical class to namespace "prod".
func constrainedLab(t *testing.T) *coreLab {
	t.Helper()
	l := newCoreLab(t, admission.FailOpen)
	cons, err := policies.ParseConstraints([]byte(`{"restrictedClasses":["latency-critical"],
		"rules":[{"namespaces":["prod"],"allowClasses":["latency-critical"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	testutil.UnmountUnder(t, l.stateDir)
	lg := logrus.New()
	lg.SetOutput(&strings.Builder{})
	l.core, err = admission.New(admission.Config{FailMode: admission.FailOpen, StateDir: l.stateDir, DevrtDir: t.TempDir()},
		l.reg, policies.BuiltinCatalog(), cons, l.res, logrus.NewEntry(lg))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func readSettings(t *testing.T, dir string) ([]byte, tenantcfg.Settings) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, tenantcfg.FileName))
	if err != nil {
		t.Fatal(err)
	}
	s, err := tenantcfg.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return b, s
}

// TestSetPolicyChangesARunningTenant: a registered tenant's policy changes
// in the registry record, in its cgroup's entry (what the kernel side
// reads) and in settings.bin (what the device runtime re-reads), by id or
// key; the new record is what a restarted agent recovers.
func TestSetPolicyChangesARunningTenant(t *testing.T) {
	l := constrainedLab(t)
	info := admission.ContainerInfo{ID: "sp1", Name: "sp1", PodName: "web", PodNamespace: "dev", Runtime: bpf.RuntimeNRI,
		Annotations: map[string]string{"policy.gpuext.io": "batch"}, CgroupsPath: l.cgroup(t, "sp1")}
	d, err := l.core.Admit(info)
	if err != nil || d.RequestErr != nil {
		t.Fatalf("admit: %v %v", err, d.RequestErr)
	}
	_, cg, err := l.core.Register(info, d)
	if err != nil {
		t.Fatal(err)
	}
	dir := admission.TenantDir(l.stateDir, uint64(d.Tenant))
	if _, s := readSettings(t, dir); s.Class != tenantcfg.ClassBestEffort {
		t.Fatalf("admitted settings class %v, want best-effort", s.Class)
	}

	nd, err := l.core.SetPolicy(admission.PolicyChange{Tenant: d.TenantKey, Policy: "quota",
		Params: map[string]string{"quota": "1GiB"}})
	if err != nil {
		t.Fatal(err)
	}
	if nd.Tenant != d.Tenant || nd.ConfigDigest == d.ConfigDigest {
		t.Fatalf("set-policy decision %+v, admitted %+v: want the same tenant, another config", nd, d)
	}
	rec, err := l.reg.TenantRecord(d.Tenant)
	if err != nil || rec.Policy != "quota" || rec.Config.QuotaBytes != 1<<30 {
		t.Fatalf("registry record after set-policy: %v policy %q quota %d, want quota 1GiB", err, rec.Policy, rec.Config.QuotaBytes)
	}
	kt, err := l.reg.Lookup(cg.ID)
	if err != nil || kt.Config.QuotaBytes != 1<<30 || kt.Config.PriorityClass != rec.Config.PriorityClass {
		t.Fatalf("cgroup %d entry (what the kernel reads): %v quota %d class %d, want quota 1GiB class %d",
			cg.ID, err, kt.Config.QuotaBytes, kt.Config.PriorityClass, rec.Config.PriorityClass)
	}
	if _, s := readSettings(t, dir); s.Class != tenantcfg.ClassStandard || s.QuotaBytes != 1<<30 {
		t.Fatalf("settings.bin after set-policy: class %v quota %d, want standard, 1GiB", s.Class, s.QuotaBytes)
	}
	cfgJSON, _ := os.ReadFile(filepath.Join(dir, tenantcfg.ConfigFileName))
	if !strings.Contains(string(cfgJSON), `"policy": "quota"`) {
		t.Fatalf("config.json after set-policy:\n%s", cfgJSON)
	}
	// a restarted agent recovers the new decision, and registering with it
	// (Synchronize) keeps it
	sd, ok, err := l.core.StoredDecision(info)
	if err != nil || !ok || sd.ConfigDigest != nd.ConfigDigest || sd.Policy.Name != "quota" {
		t.Fatalf("stored decision %+v ok=%v err=%v, want policy quota config %s", sd, ok, err, nd.ConfigDigest)
	}
	if _, err := l.core.Synchronize(bpf.RuntimeNRI, []admission.ContainerInfo{info}); err != nil {
		t.Fatal(err)
	}
	if rec, _ := l.reg.TenantRecord(d.Tenant); rec.Policy != "quota" {
		t.Fatalf("after Synchronize the tenant has policy %q, want quota kept", rec.Policy)
	}
	// by id too
	if nd, err = l.core.SetPolicy(admission.PolicyChange{Tenant: strconv.FormatUint(uint64(d.Tenant), 10), Policy: "default"}); err != nil || nd.Policy.Name != "default" {
		t.Fatalf("set-policy by id: %+v %v", nd, err)
	}
}

// TestSetPolicyRefusesWhatAdmissionRefuses: a policy the constraints forbid
// the tenant's namespace, an unknown policy, a bad value, a tenant-mode
// change and an unknown tenant are refused with keyed errors, in fail-open
// mode too, and the tenant's registry config and settings.bin stay as they
// were.
func TestSetPolicyRefusesWhatAdmissionRefuses(t *testing.T) {
	l := constrainedLab(t)
	info := admission.ContainerInfo{ID: "sp2", Name: "sp2", PodName: "web", PodNamespace: "dev", Runtime: bpf.RuntimeNRI,
		Annotations: map[string]string{"policy.gpuext.io": "batch"}, CgroupsPath: l.cgroup(t, "sp2")}
	d, err := l.core.Admit(info)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.core.Register(info, d); err != nil {
		t.Fatal(err)
	}
	dir := admission.TenantDir(l.stateDir, uint64(d.Tenant))
	before, _ := readSettings(t, dir)
	recBefore, _ := l.reg.TenantRecord(d.Tenant)
	for _, tc := range []struct {
		pc   admission.PolicyChange
		kind admission.ErrorKind
		want string
	}{
		{admission.PolicyChange{Tenant: d.TenantKey, Policy: "latency-critical"}, admission.KindConstraint, "latency-critical"},
		{admission.PolicyChange{Tenant: d.TenantKey, Policy: "no-such-policy"}, admission.KindRequest, "no-such-policy"},
		{admission.PolicyChange{Tenant: d.TenantKey, Policy: "quota", Params: map[string]string{"quota": "lots"}}, admission.KindRequest, "quota.gpuext.io"},
		{admission.PolicyChange{Tenant: d.TenantKey, Policy: "batch", Params: map[string]string{"tenant": "pod"}}, admission.KindRequest, "tenant"},
		{admission.PolicyChange{Tenant: d.TenantKey, Policy: "batch", Params: map[string]string{"other.example.com/x": "1"}}, admission.KindRequest, "other.example.com/x"},
	} {
		_, err := l.core.SetPolicy(tc.pc)
		if err == nil || admission.KindOf(err) != tc.kind || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetPolicy(%+v): %v (kind %s), want a %s error naming %q", tc.pc, err, admission.KindOf(err), tc.kind, tc.want)
		}
	}
	if _, err := l.core.SetPolicy(admission.PolicyChange{Tenant: "nri/ctr/nobody", Policy: "batch"}); !errors.Is(err, admission.ErrUnknownTenant) ||
		!strings.Contains(err.Error(), "nri/ctr/nobody") || admission.KindOf(err) != admission.KindNotFound {
		t.Errorf("unknown tenant: %v (kind %s), want ErrUnknownTenant of kind %s naming it", err, admission.KindOf(err), admission.KindNotFound)
	}
	after, _ := readSettings(t, dir)
	recAfter, _ := l.reg.TenantRecord(d.Tenant)
	if !bytes.Equal(before, after) || recAfter.Policy != recBefore.Policy || recAfter.Config != recBefore.Config {
		t.Fatalf("refused changes changed the tenant: policy %q -> %q, settings.bin changed: %v",
			recBefore.Policy, recAfter.Policy, !bytes.Equal(before, after))
	}
}
