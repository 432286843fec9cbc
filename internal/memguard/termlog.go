package memguard

import (
	"fmt"
	"sync"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/policies"
)

// TerminationLogs remembers each admitted container's termination-message
// file (the host file Kubernetes mounts at /dev/termination-log, as the
// runtime reported it), so that a container whose process the guard
// stopped says why in its status (kubectl describe: Last State's Message).
type TerminationLogs struct {
	mu sync.Mutex
	m  map[string]string // container id -> host file
}

// MaxTerminationLogs bounds the containers remembered.
const MaxTerminationLogs = 1 << 16

// NewTerminationLogs returns an empty set.
func NewTerminationLogs() *TerminationLogs { return &TerminationLogs{m: map[string]string{}} }

// Note remembers container id's termination-message file ("" forgets it).
func (t *TerminationLogs) Note(id, path string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if path == "" {
		delete(t.m, id)
		return
	}
	if _, ok := t.m[id]; ok || len(t.m) < MaxTerminationLogs {
		t.m[id] = path
	}
}

// Forget drops container id.
func (t *TerminationLogs) Forget(id string) { t.Note(id, "") }

func (t *TerminationLogs) path(id string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[id]
}

// Message is what a stopped container's termination message says: one
// line with no newline at its end, since the kubelet puts the file's bytes
// as they are into the container's status (kubectl describe would show an
// empty line after it).
func Message(ev Event, margin uint64) string {
	procs := "1 process"
	if ev.Procs != 1 {
		procs = fmt.Sprintf("%d processes", ev.Procs)
	}
	return fmt.Sprintf("gpuext memory guard: process %d stopped (SIGKILL): tenant %d held %s of GPU %d memory (NVML, %s), over its quota of %s plus %s of driver context per process; the process held %s",
		ev.Victim, ev.Tenant, policies.FormatSize(ev.Used), ev.GPU, procs, policies.FormatSize(ev.Quota),
		policies.FormatSize(margin), policies.FormatSize(ev.VictimUsed))
}

// Looker finds a tenant by cgroup (*bpf.Registry).
type Looker interface {
	Lookup(cg cgroup.ID) (bpf.Tenant, error)
}

// Explain writes the reason of a kill into the stopped container's
// termination-message file, when the runtime gave one: opened without
// following a link and without creating it, a regular file only.
func (t *TerminationLogs) Explain(reg Looker, ev Event, margin uint64, log *logrus.Entry) {
	if ev.Victim == 0 {
		return
	}
	tn, err := reg.Lookup(ev.VictimCgroup)
	if err != nil {
		return
	}
	for _, cg := range tn.Cgroups {
		if cg.CgroupID != ev.VictimCgroup {
			continue
		}
		path := t.path(cg.ContainerID)
		if path == "" {
			return
		}
		if err := writeMessage(path, Message(ev, margin)); err != nil {
			log.WithError(err).WithFields(logrus.Fields{"container": cg.ContainerID, "file": path}).
				Warn("could not write the stop's reason to the container's termination message")
		}
		return
	}
}

func writeMessage(path, msg string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s: not a regular file", path)
	}
	if err := unix.Ftruncate(fd, 0); err != nil {
		return err
	}
	_, err = unix.Write(fd, []byte(msg))
	return err
}
