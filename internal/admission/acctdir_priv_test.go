package admission_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/lib/testutil"
)

// hostRun makes a small tmpfs, as the host's /run (where the state dir
// lives) is on most hosts, and returns it.
func hostRun(t *testing.T, size string) string {
	t.Helper()
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0755"); err != nil {
		testutil.SkipOrFail(t, "mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// fill writes into dir until the filesystem says no, and returns how many
// bytes it took and the error that stopped it.
func fill(t *testing.T, dir string, limit int64) (int64, error) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "junk"), os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := bytes.Repeat([]byte{'x'}, 1<<20)
	var n int64
	for n < limit {
		m, err := f.Write(buf)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// TestFullTenantAffectsOnlyItself: a tenant that fills its accounting dir
// is stopped at its own bound (ENOSPC in its dir); the state dir it sits on
// (the host's /run) keeps room, and the next tenant is admitted (strict: any
// write error would refuse it) with an empty, writable accounting dir.
func TestFullTenantAffectsOnlyItself(t *testing.T) {
	stateDir := hostRun(t, "48m") // less than a tenant may fill on main: everything
	l := newCoreLabIn(t, admission.FailClosed, stateDir)
	a, err := l.core.Admit(admission.ContainerInfo{ID: "filler", Name: "filler", Runtime: bpf.RuntimeNRI})
	if err != nil {
		t.Fatal(err)
	}
	acctA := admission.AcctDir(stateDir, uint64(a.Tenant))
	n, err := fill(t, acctA, 1<<30)
	if !errors.Is(err, syscall.ENOSPC) || n > admission.AcctDirBytes {
		t.Fatalf("tenant wrote %d bytes into its acct dir (stopped by %v); want ENOSPC by %d bytes", n, err, admission.AcctDirBytes)
	}
	// the host's filesystem under the state dir still has room
	if err := os.WriteFile(filepath.Join(stateDir, "host-file"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatalf("the state dir's filesystem is full after a tenant filled its acct dir: %v", err)
	}
	b, err := l.core.Admit(admission.ContainerInfo{ID: "next", Name: "next", Runtime: bpf.RuntimeNRI})
	if err != nil {
		t.Fatalf("another tenant's admission after a tenant filled its acct dir: %v", err)
	}
	acctB := admission.AcctDir(stateDir, uint64(b.Tenant))
	if ents, err := os.ReadDir(acctB); err != nil || len(ents) != 0 {
		t.Fatalf("new tenant's acct dir: %v %v; want empty", ents, err)
	}
	if err := os.WriteFile(filepath.Join(acctB, "usage"), make([]byte, 4096), 0o666); err != nil {
		t.Fatalf("the other tenant cannot write its usage file: %v", err)
	}
	// the full tenant's dir goes with it, and gives its room back
	if err := l.core.Remove(admission.ContainerInfo{ID: "filler", Runtime: bpf.RuntimeNRI}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(acctA); !os.IsNotExist(err) {
		t.Fatalf("acct dir of a removed tenant: %v; want it gone", err)
	}
}

// TestReusedTenantIDStartsEmpty: a tenant id given back and handed to a new
// tenant comes with a fresh accounting dir: nothing the previous holder
// wrote, whether the agent was killed between releasing the id and
// collecting its dirs, or left a dir behind without its owner's stamp.
func TestReusedTenantIDStartsEmpty(t *testing.T) {
	l := newCoreLab(t, admission.FailClosed)
	info := admission.ContainerInfo{ID: "c1", Name: "c1", Runtime: bpf.RuntimeNRI}
	old, err := l.core.Admit(info)
	if err != nil {
		t.Fatal(err)
	}
	acct := admission.AcctDir(l.stateDir, uint64(old.Tenant))
	if err := os.WriteFile(filepath.Join(acct, "usage"), []byte("previous tenant's secret"), 0o666); err != nil {
		t.Fatal(err)
	}
	// The agent is killed after the registry gave the id back and before
	// it collected the directories.
	if err := l.reg.ReleaseTenant(old.Tenant); err != nil {
		t.Fatal(err)
	}
	again, err := l.core.Admit(info) // same key: the same free id comes first
	if err != nil {
		t.Fatal(err)
	}
	if again.Tenant != old.Tenant {
		t.Fatalf("new tenant got id %d, the test wants the reused id %d", again.Tenant, old.Tenant)
	}
	if b, err := os.ReadFile(filepath.Join(acct, "usage")); err == nil {
		t.Fatalf("new tenant %d reads the previous tenant's usage file: %q", again.Tenant, b)
	}
	// Re-admitting the same (live) tenant keeps what it wrote.
	if err := os.WriteFile(filepath.Join(acct, "usage"), []byte("mine"), 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := l.core.Admit(info); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(acct, "usage")); err != nil || string(b) != "mine" {
		t.Fatalf("re-admission of the live tenant: usage %q %v; want its own bytes kept", b, err)
	}

	// A directory left by an earlier agent (no stamp: killed while making it).
	next := admission.ContainerInfo{ID: "c2", Name: "c2", Runtime: bpf.RuntimeNRI}
	d2, err := l.core.Admit(next)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.core.Remove(next); err != nil {
		t.Fatal(err)
	}
	left := admission.AcctDir(l.stateDir, uint64(d2.Tenant))
	if err := os.MkdirAll(filepath.Join(left, "probes"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, "probes", "1.status"), []byte("stale"), 0o666); err != nil {
		t.Fatal(err)
	}
	d3, err := l.core.Admit(next)
	if err != nil || d3.Tenant != d2.Tenant {
		t.Fatalf("admit: tenant %d %v; the test wants the reused id %d", d3.Tenant, err, d2.Tenant)
	}
	if ents, err := os.ReadDir(left); err != nil || len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("new tenant's acct dir holds %s (%v); want it empty", strings.Join(names, ","), err)
	}
}

// TestAcctDirWhereMountsDoNotReachTheNode: an agent whose mounts stay in
// its own mount namespace (a container whose state dir has no Bidirectional
// propagation) would hand the runtime the empty dir below its tmpfs: the
// tenant would write where the agent never reads. The agent sees that and
// makes a plain dir the node sees, with a warning; a second container of
// the same tenant shares it.
func TestAcctDirWhereMountsDoNotReachTheNode(t *testing.T) {
	// the host's /proc as the agent container has it (hostRoot): its "1"
	// is this test process, whose main thread stays in the host's mounts
	hostRoot := t.TempDir()
	if err := os.Mkdir(filepath.Join(hostRoot, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(fmt.Sprintf("/proc/%d", os.Getpid()), filepath.Join(hostRoot, "proc", "1")); err != nil {
		t.Fatal(err)
	}
	l := newCoreLabIn(t, admission.FailClosed, t.TempDir(), func(c *admission.Config) { c.HostRoot = hostRoot })
	pod := func(id string) admission.ContainerInfo {
		return admission.ContainerInfo{ID: id, Name: id, PodName: "p", PodNamespace: "ns", PodUID: "uid-p", Runtime: bpf.RuntimeNRI,
			PodAnnotations: map[string]string{"tenant.gpuext.io/pod": "pod"}}
	}
	type result struct {
		d   admission.Decision
		err error
	}
	done := make(chan result)
	go func() {
		// this thread only: a mount namespace of its own, as an agent
		// container's; the thread ends with the goroutine (never unlocked)
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			done <- result{err: err}
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			done <- result{err: err}
			return
		}
		d, err := l.core.Admit(pod("a"))
		if err == nil {
			_, err = l.core.Admit(pod("b"))
		}
		done <- result{d, err}
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	acct := admission.AcctDir(l.stateDir, uint64(r.d.Tenant)) // as the node sees it (this thread's namespace is the host's)
	fi, err := os.Stat(acct)
	if err != nil || fi.Mode()&os.ModePerm != 0o777 || fi.Mode()&os.ModeSticky == 0 {
		t.Fatalf("acct dir on the node: %v %v; want a world-writable sticky dir", fi, err)
	}
	if err := os.WriteFile(filepath.Join(acct, "usage"), []byte("x"), 0o666); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(l.log.String(), "NOT bounded") {
		t.Fatalf("no warning that acct dirs are not bounded:\n%s", l.log)
	}
	// the pod's second container (admitted above) shares the dir; admitting
	// again keeps what the tenant wrote
	if _, err := l.core.Admit(pod("c")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(acct, "usage")); err != nil || string(b) != "x" {
		t.Fatalf("a pod tenant's acct dir after another admission: %q %v; want what it wrote", b, err)
	}
}
