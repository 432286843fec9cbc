package board

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuext/gpuext/devrt/tenantcfg"
)

// The liveness beacon of a slot is an open-file-description lock, which
// only the owner's own open of the usage file holds.

// TestSlotSurvivesSecondOpen: a process that opens and closes its tenant's
// usage file a second time (as any library in it might) keeps its slot
// counted: the tenant view still shows its memory, and another process of
// the tenant cannot allocate past the quota. With a POSIX record lock the
// close dropped the lock: the slot looked dead, its memory stopped counting
// and the quota let the second process in.
func TestSlotSurvivesSecondOpen(t *testing.T) {
	build := buildDevrt(t)
	state := t.TempDir()
	tn := newTenantFile(t, state, tenantcfg.File{TenantID: 4, Policy: "quota", Class: "standard", QuotaBytes: 3 << 29}) // 1.5 GiB
	hold(t, build, tn, "hold", "slotapp", "alloc", "1GiB", "reopen")
	u, err := ReadUsage(tn.acct)
	if err != nil {
		t.Fatal(err)
	}
	if u.UsedBytes != 1<<30 {
		t.Errorf("tenant view after the holder reopened its usage file: used %d, want 1GiB", u.UsedBytes)
	}
	cmd := exec.Command(filepath.Join(build, "fake", "app_procaddr"), "alloc", "1GiB")
	cmd.Env = tn.env(build, "")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "alloc 1073741824 CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("second process's 1GiB with 1GiB of 1.5GiB held: %q, want refused", got)
	}
}

// TestForkedChildDoesNotKeepParentSlot: a forked child shares its parent's
// open of the usage file, and with it the parent's lock; it must reopen, or
// a parent killed while the child lives would keep its memory counted.
func TestForkedChildDoesNotKeepParentSlot(t *testing.T) {
	build := buildDevrt(t)
	state := t.TempDir()
	tn := newTenant(t, state, 5, "standard", 0)
	h := hold(t, build, tn, "child alloc 268435456 ok", "slotapp", "alloc", "1GiB", "fork", "256MiB")
	var child int
	for _, l := range h.lines {
		if v, ok := strings.CutPrefix(l, "fork child="); ok {
			child, _ = strconv.Atoi(v)
		}
	}
	if child <= 0 {
		t.Fatalf("no child pid in %q", h.lines)
	}
	t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
	if u, err := ReadUsage(tn.acct); err != nil || u.UsedBytes != 1<<30+1<<28 {
		t.Fatalf("parent and child alive: used %d (%v), want 1.25GiB", u.UsedBytes, err)
	}
	h.cmd.Process.Kill() // the parent only
	h.cmd.Wait()
	if u, err := ReadUsage(tn.acct); err != nil || u.UsedBytes != 1<<28 {
		t.Errorf("parent killed, child alive: used %d (%v), want the child's 256MiB", u.UsedBytes, err)
	}
}
