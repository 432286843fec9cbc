package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAgentOnFreshHost: the agent binary started where /sys/fs/bpf is a
// plain directory (its own mount namespace, bpffs unmounted there, as on a
// host whose PID 1 is not systemd) mounts a bpf filesystem itself, says so
// in its log, and admits and registers a real runc container that
// gpuext-runc and the hook send it. It fails if the agent needs bpffs
// premounted.
func TestAgentOnFreshHost(t *testing.T) {
	ociRequirePrivileged(t, "runc", "busybox", "go", "sh")
	l := ociNewLab(t)
	l.StopAgent(t)
	os.Remove(l.AgentSocket)
	script := `while grep -q ' /sys/fs/bpf bpf ' /proc/self/mounts; do umount -l /sys/fs/bpf || exit 9; done
echo NO-BPFFS; exec "$0" --nri=false --config "$1"`
	logf, err := os.Create(filepath.Join(l.Dir, "fresh-agent.stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("sh", "-c", script, l.Agent, l.Config)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS} // Go makes / private first
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }() //nolint:errcheck
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill() //nolint:errcheck
		}
	})
	ociWait(t, 20*time.Second, "agent socket", func() bool {
		_, err := os.Stat(l.AgentSocket)
		return err == nil
	})
	if out := readFile(logf.Name()); !strings.Contains(out, "NO-BPFFS") {
		t.Fatalf("the agent's namespace still had bpffs: %s", out)
	}
	if !l.LogContains("no bpf filesystem was mounted: mounted one", `"mountpoint":"/sys/fs/bpf"`) {
		t.Fatalf("the agent did not log mounting bpffs:\n%s", readFile(l.Log))
	}
	b := ociNewBundle(t, l, "fresh", map[string]string{"policy.gpuext.io": "batch"}, nil, ociScript)
	if stderr, err := b.runDetached(t, l.Wrapper, "--config", l.Config); err != nil {
		t.Fatalf("gpuext-runc run: %v\n%s", err, stderr)
	}
	out := b.output(t, "READY")
	if pol, _ := ociEnvValue(out, "GPUEXT_POLICY"); pol != "batch" {
		t.Fatalf("container policy %q, want batch:\n%s", pol, out)
	}
	if !l.LogContains(`"stage":"createRuntime"`, b.ID, "registered tenant cgroup") {
		t.Fatal("the hook did not register the container through the agent")
	}
	b.stop(t)
}
