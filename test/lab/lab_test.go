package lab

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestContainerdPodEnvAndCgroup runs a CRI pod on a private containerd and
// checks what a user of the lab relies on: the container's env, its exit
// code, and that it has its own cgroup v2 directory named by CRI's cgroups path.
func TestContainerdPodEnvAndCgroup(t *testing.T) {
	c := StartContainerd(t, ContainerdOptions{})
	if _, err := os.Stat(c.NRISocket); err != nil {
		t.Fatalf("NRI socket: %v", err)
	}

	p := c.RunPod(t, "envcheck", `env; grep "^0::" /proc/self/cgroup; exit 3`, PodOptions{
		PodAnnotations: map[string]string{"policy.gpuext.io/pod": "batch"},
		Annotations:    map[string]string{"quota.gpuext.io": "2GiB"},
	})
	if code := p.Wait(t, 30*time.Second); code != 3 {
		t.Fatalf("exit code %d, want 3", code)
	}
	env := p.Env(t)
	if env["GPUEXT_LAB"] != "1" {
		t.Errorf("container env GPUEXT_LAB=%q, want 1 (from testdata/ctr.json); env %v", env["GPUEXT_LAB"], env)
	}
	if !strings.Contains(p.Logs(t), "0::/kubepods/besteffort/pod") {
		t.Errorf("container not in a kubepods cgroup v2 path:\n%s", p.Logs(t))
	}

	// A running container: its v2 cgroup dir exists and holds its pid.
	run := c.RunPod(t, "sleeper", "exec sleep 300", PodOptions{})
	pid := run.Pid(t)
	rel, err := CgroupV2Path(pid)
	if err != nil {
		t.Fatal(err)
	}
	mnt, err := CgroupV2Mount()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(rel, "/"+run.ContainerID) {
		t.Errorf("cgroup v2 path %q does not end in the container id %s", rel, run.ContainerID)
	}
	procs, err := os.ReadFile(filepath.Join(mnt, rel, "cgroup.procs"))
	if err != nil {
		t.Fatalf("container cgroup v2 dir: %v", err)
	}
	if !strings.Contains("\n"+string(procs), "\n"+strconv.Itoa(pid)+"\n") {
		t.Errorf("pid %d not in %s/cgroup.procs: %q", pid, filepath.Join(mnt, rel), procs)
	}
	run.Remove(t)
	if _, err := os.Stat(filepath.Join(mnt, rel)); !os.IsNotExist(err) {
		t.Errorf("cgroup %s still there after pod removal (err %v)", rel, err)
	}
}
