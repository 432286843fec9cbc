package memguard

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup"
)

// oneTenant is a registry of tenant 3, containers "a" (cgroup 30) and "b"
// (cgroup 31).
type oneTenant struct{}

func (oneTenant) Lookup(cg cgroup.ID) (bpf.Tenant, error) {
	if cg != 30 && cg != 31 {
		return bpf.Tenant{}, errors.New("no tenant")
	}
	return bpf.Tenant{ID: 3, Cgroups: []bpf.CgroupEntry{{CgroupID: 30, ContainerID: "a"}, {CgroupID: 31, ContainerID: "b"}}}, nil
}

var stopOfA = Event{Tenant: 3, GPU: 0, Used: 8448 << 20, Quota: 4 * gib, Procs: 1,
	Victim: 4242, VictimUsed: 8448 << 20, VictimCgroup: 30, Action: ActionKill}

// kubeletFile makes a termination-message file as the kubelet does before
// the container starts: created empty, mode 0666.
func kubeletFile(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o666); err != nil {
		t.Fatal(err)
	}
	return p
}

func explainLog() (*logrus.Entry, *logtest.Hook) {
	lg, hook := logtest.NewNullLogger()
	return logrus.NewEntry(lg), hook
}

// What the kubelet reads back after the stop is the message alone: what the
// tenant wrote there before (longer than the message) is gone, the file is
// the one the kubelet made (not replaced), and there is no newline for
// kubectl describe to show as an empty line. The other container's file is
// untouched.
func TestExplainReplacesWhatTheTenantWroteWithTheReason(t *testing.T) {
	dir := t.TempDir()
	a, b := kubeletFile(t, dir, "a"), kubeletFile(t, dir, "b")
	if err := os.WriteFile(a, []byte(strings.Repeat("tenant's own words ", 500)), 0o666); err != nil {
		t.Fatal(err)
	}
	var before syscall.Stat_t
	if err := syscall.Stat(a, &before); err != nil {
		t.Fatal(err)
	}
	logs := NewTerminationLogs()
	logs.Note("a", a)
	logs.Note("b", b)
	log, hook := explainLog()
	logs.Explain(oneTenant{}, stopOfA, gib, log)

	got, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	want := "gpuext memory guard: process 4242 stopped (SIGKILL): tenant 3 held 8448MiB of GPU 0 memory (NVML, 1 process), over its quota of 4GiB plus 1GiB of driver context per process; the process held 8448MiB"
	if string(got) != want {
		t.Errorf("container a's termination message:\n%q\nwant\n%q", got, want)
	}
	var after syscall.Stat_t
	if err := syscall.Stat(a, &after); err != nil {
		t.Fatal(err)
	}
	if after.Ino != before.Ino || after.Mode&0o777 != 0o666 {
		t.Errorf("the file is inode %d mode %o, want the kubelet's inode %d with its mode 0666", after.Ino, after.Mode&0o777, before.Ino)
	}
	if data, _ := os.ReadFile(b); len(data) != 0 {
		t.Errorf("container b's termination message: %q, want none (its process was not stopped)", data)
	}
	if len(hook.AllEntries()) != 0 {
		t.Errorf("log entries for a plain write: %v", hook.AllEntries())
	}
}

// The guard never creates a file, follows a link or opens a FIFO where the
// runtime said the container's termination message is; each refusal is a
// warning naming the container and the file.
func TestExplainRefusesWhatIsNotTheKubeletsFile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, p string) (check func(t *testing.T))
	}{
		{"missing", func(t *testing.T, p string) func(*testing.T) {
			return func(t *testing.T) {
				if _, err := os.Lstat(p); !os.IsNotExist(err) {
					t.Errorf("%s was created (%v)", p, err)
				}
			}
		}},
		{"symlink", func(t *testing.T, p string) func(*testing.T) {
			target := filepath.Join(filepath.Dir(p), "host-file")
			if err := os.WriteFile(target, []byte("host data"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			return func(t *testing.T) {
				if data, _ := os.ReadFile(target); string(data) != "host data" {
					t.Errorf("the link's target now holds %q", data)
				}
			}
		}},
		{"fifo", func(t *testing.T, p string) func(*testing.T) {
			if err := syscall.Mkfifo(p, 0o666); err != nil {
				t.Fatal(err)
			}
			return func(*testing.T) {} // returning at all: the open did not block
		}},
		{"directory", func(t *testing.T, p string) func(*testing.T) {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
			return func(*testing.T) {}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "termination-log")
			check := tc.setup(t, p)
			logs := NewTerminationLogs()
			logs.Note("a", p)
			log, hook := explainLog()
			logs.Explain(oneTenant{}, stopOfA, gib, log)
			check(t)
			e := hook.LastEntry()
			if e == nil || e.Level != logrus.WarnLevel || e.Data["container"] != "a" || e.Data["file"] != p {
				t.Fatalf("want a warning naming container a and %s, got %+v", p, e)
			}
		})
	}
}

// No stop, a container the runtime gave no file, or a forgotten one: nothing
// is written and nothing logged.
func TestExplainWritesOnlyForAStoppedContainerWithAFile(t *testing.T) {
	dir := t.TempDir()
	a := kubeletFile(t, dir, "a")
	logs := NewTerminationLogs()
	logs.Note("a", a)
	log, hook := explainLog()

	reportOnly := stopOfA
	reportOnly.Victim = 0
	logs.Explain(oneTenant{}, reportOnly, gib, log)
	otherCgroup := stopOfA
	otherCgroup.VictimCgroup = 31 // container b: no file noted
	logs.Explain(oneTenant{}, otherCgroup, gib, log)
	logs.Forget("a")
	logs.Explain(oneTenant{}, stopOfA, gib, log)

	if data, _ := os.ReadFile(a); len(data) != 0 {
		t.Errorf("termination message %q, want none", data)
	}
	if len(hook.AllEntries()) != 0 {
		t.Errorf("log entries: %v", hook.AllEntries())
	}
}
