package admission

import (
	"net"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/policies"
)

// A host with an MPS daemon: every tenant container is an MPS client (the
// client socket of the pipe directory bound at the same path, and
// CUDA_MPS_PIPE_DIRECTORY),
// and the best-effort tenant's SM share reaches its config file.
func TestInjectionMPS(t *testing.T) {
	cat := policies.BuiltinCatalog()
	batch, ok := cat.Get("batch")
	if !ok {
		t.Fatal("no batch policy")
	}
	find := func(inj Injection, dst string) *Mount {
		for i := range inj.Mounts {
			if inj.Mounts[i].Destination == dst {
				return &inj.Mounts[i]
			}
		}
		return nil
	}
	env := func(inj Injection, key string) (string, bool) {
		for _, e := range inj.Env {
			if e.Key == key {
				return e.Value, true
			}
		}
		return "", false
	}

	off := &Core{cfg: Config{StateDir: t.TempDir(), DevrtDir: "/opt/devrt"}}
	inj := off.injection(ContainerInfo{}, 3, "/t", "/a", batch)
	if m := find(inj, "/run/nvidia-mps"); m != nil {
		t.Errorf("no MPS configured, but mounted %+v", m)
	}
	if v, ok := env(inj, EnvMPSPipeDir); ok {
		t.Errorf("no MPS configured, but %s=%s", EnvMPSPipeDir, v)
	}

	// a pipe directory whose daemon is not running (no socket): no MPS
	// mount (runc would fail the container on a missing source), no env
	pipe := shortTempDir(t)
	down := &Core{cfg: Config{StateDir: t.TempDir(), DevrtDir: "/opt/devrt", MPSPipeDir: pipe}}
	inj = down.injection(ContainerInfo{Name: "c"}, 3, "/t", "/a", batch)
	if m := find(inj, pipe+"/control"); m != nil {
		t.Errorf("no MPS daemon socket, but mounted %+v", m)
	}
	if v, ok := env(inj, EnvMPSPipeDir); ok {
		t.Errorf("no MPS daemon socket, but %s=%s", EnvMPSPipeDir, v)
	}
	l, err := net.Listen("unix", pipe+"/control")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	on := &Core{cfg: Config{StateDir: t.TempDir(), DevrtDir: "/opt/devrt", MPSPipeDir: pipe, MPSShmDir: "/run/nvidia-mps-shm"}}
	inj = on.injection(ContainerInfo{}, 3, "/t", "/a", batch)
	// the client socket alone (review row 11): not the directory, whose
	// control_privileged socket takes the daemon's commands
	if m := find(inj, pipe); m != nil {
		t.Errorf("the whole pipe directory is mounted into the tenant: %+v", m)
	}
	for _, m := range inj.Mounts {
		if strings.HasPrefix(m.Source, pipe+"/") && m.Source != pipe+"/control" {
			t.Errorf("pipe directory entry %s mounted into the tenant; only control may be", m.Source)
		}
	}
	m := find(inj, pipe+"/control")
	if m == nil || m.Source != pipe+"/control" || !slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind") {
		t.Errorf("client socket mount = %+v, want %s/control bound at the same path", m, pipe)
	}
	if v, _ := env(inj, EnvMPSPipeDir); v != pipe {
		t.Errorf("%s = %q", EnvMPSPipeDir, v)
	}
	if m := find(inj, "/dev/shm"); m == nil || m.Source != "/run/nvidia-mps-shm" {
		t.Errorf("/dev/shm mount = %+v", m)
	}

	// mpsRootTenants: who gets the control socket. Root can change a running
	// server's share through it (make gpu-test, mps-tenant-daemon-settings),
	// a non-root user cannot (mps-tenant-nonroot-server-share).
	nonRoot := ContainerInfo{User: ProcessUser{Known: true, UID: 1000}}
	nsRoot := ContainerInfo{User: ProcessUser{Known: true, UserNS: true}}
	hostRoot := ContainerInfo{User: ProcessUser{Known: true}}
	for _, tc := range []struct {
		mode  string
		info  ContainerInfo
		what  string
		wants bool
	}{
		{"", hostRoot, "root, default (allow)", true},
		{MPSRootAllow, hostRoot, "root, allow", true},
		{MPSRootDeny, hostRoot, "root, deny", false},
		{MPSRootDeny, ContainerInfo{}, "user not known, deny", false},
		{MPSRootDeny, nonRoot, "uid 1000, deny", true},
		{MPSRootDeny, nsRoot, "root in a user namespace, deny", true},
	} {
		c := &Core{cfg: Config{StateDir: t.TempDir(), DevrtDir: "/opt/devrt", MPSPipeDir: pipe, MPSRootTenants: tc.mode}}
		inj := c.injection(tc.info, 3, "/t", "/a", batch)
		_, hasEnv := env(inj, EnvMPSPipeDir)
		if got := find(inj, pipe+"/control") != nil; got != tc.wants || hasEnv != tc.wants {
			t.Errorf("%s: control socket mounted %v, %s set %v; want %v", tc.what, got, EnvMPSPipeDir, hasEnv, tc.wants)
		}
	}

	if got := batch.Priority.EffectiveSMPercent(); got != 40 {
		t.Errorf("batch SM share = %d, want 40", got)
	}
	lc, _ := cat.Get("latency-critical")
	lc.Priority.SMPercent = 30 // a share on a latency-critical policy never applies
	if got := lc.Priority.EffectiveSMPercent(); got != 0 {
		t.Errorf("latency-critical SM share = %d, want 0", got)
	}
}

// shortTempDir is a temp dir short enough for a unix socket path (108 bytes).
func shortTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "gx-mps-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
