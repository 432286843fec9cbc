package e2e

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/internal/admission"
)

// ociSetPolicyScript prints, every 100 ms, what the container's own process
// sees of its tenant: the policy in config.json and the digest of
// settings.bin (what the device runtime re-reads), through the tenant dir
// mounted at container start.
const ociSetPolicyScript = `echo READY; while true; do echo "SEEN $(grep '"policy"' /run/gpuext/tenant/config.json | tr -d ' ,') $(md5sum /run/gpuext/tenant/settings.bin | cut -d' ' -f1)"; sleep 0.1; done`

// TestOCISetPolicy: `gpuextctl tenants set-policy` changes a running
// container's policy through the real agent: the registry (what the kernel
// side reads) has it at once, and the container's process, never
// restarted, sees the new config.json and settings.bin in its mounted
// tenant dir. A policy the admin constraints forbid is refused with the key
// and value, and nothing changes; the new policy survives an agent restart.
func TestOCISetPolicy(t *testing.T) {
	ociRequirePrivileged(t, "runc", "busybox", "go")
	l := ociNewLab(t)
	cons := filepath.Join(l.Dir, "constraints.json")
	if err := os.WriteFile(cons, []byte(`{"restrictedClasses":["latency-critical"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	l.WriteConfig(t, "fail-open", map[string]any{"constraintsFile": cons})
	ctl := l.Ctl(t)
	b := ociNewBundle(t, l, "setpol", map[string]string{"policy.gpuext.io": "batch"}, nil, ociSetPolicyScript)
	if stderr, err := b.runDetached(t, l.Wrapper, "--config", l.Config); err != nil {
		t.Fatalf("gpuext-runc run: %v\n%s", err, stderr)
	}
	b.output(t, `SEEN "policy":"batch"`)
	reg := l.Registry(t)
	e := ociAssertRegistered(t, reg, b.ID, b.CgroupsPath, "batch")
	pid := ociInitPid(t, b)
	settings := filepath.Join(admission.TenantDir(l.StateDir, uint64(e.Tenant.ID)), tenantcfg.FileName)

	// forbidden: refused with the key and value, nothing changes
	out, err := exec.Command(ctl, "--config", l.Config, "tenants", "set-policy", e.Tenant.Key, "latency-critical").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "policy.gpuext.io") || !strings.Contains(string(out), "latency-critical") {
		t.Fatalf("set-policy to a forbidden class: err=%v\n%s\nwant a refusal naming policy.gpuext.io=latency-critical", err, out)
	}
	t.Logf("refused as wanted: %s", strings.TrimSpace(string(out)))
	if rec, _ := reg.TenantRecord(e.Tenant.ID); rec.Policy != "batch" {
		t.Fatalf("after a refused change the tenant has policy %q, want batch", rec.Policy)
	}

	out, err = exec.Command(ctl, "--config", l.Config, "tenants", "set-policy", e.Tenant.Key, "quota",
		"--param", "quota=1GiB").CombinedOutput()
	if err != nil {
		t.Fatalf("set-policy: %v\n%s", err, out)
	}
	rec, err := reg.TenantRecord(e.Tenant.ID)
	if err != nil || rec.Policy != "quota" || rec.Config.QuotaBytes != 1<<30 {
		t.Fatalf("registry right after set-policy: %v policy %q quota %d, want quota 1GiB", err, rec.Policy, rec.Config.QuotaBytes)
	}
	data, err := os.ReadFile(settings)
	if err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum(data)
	want := `SEEN "policy":"quota" ` + hex.EncodeToString(sum[:])
	b.output(t, want)
	if got := ociInitPid(t, b); got != pid {
		t.Fatalf("the container's init pid changed from %d to %d: it was restarted", pid, got)
	}
	show, err := exec.Command(ctl, "settings", "show", filepath.Dir(settings)).CombinedOutput()
	if err != nil || !strings.Contains(string(show), "quota=1073741824 ") {
		t.Errorf("gpuextctl settings show after set-policy: %v\n%s", err, show)
	}

	// an agent restart (reconcile) keeps the new policy
	l.StopAgent(t)
	l.StartAgent(t)
	ociWait(t, 10*time.Second, "agent answers", func() bool {
		return exec.Command(ctl, "--config", l.Config, "ping").Run() == nil
	})
	if rec, _ := reg.TenantRecord(e.Tenant.ID); rec.Policy != "quota" {
		t.Fatalf("after an agent restart the tenant has policy %q, want quota kept", rec.Policy)
	}
	b.stop(t)
}

// ociInitPid is the container's init pid (runc state).
func ociInitPid(t *testing.T, b *ociBundle) int {
	t.Helper()
	out, err := exec.Command("runc", "--root", b.runcRoot, "state", b.ID).Output()
	if err != nil {
		t.Fatalf("runc state: %v", err)
	}
	var st struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Pid == 0 {
		t.Fatalf("runc state: %v pid %d\n%s", err, st.Pid, out)
	}
	return st.Pid
}
