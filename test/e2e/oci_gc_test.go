package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestOCIGCAsksTheAgent: `gpuextctl gc` is a request to the agent, which
// owns the registry and its core: with the agent up it drops the entry of a
// container that ended without its poststop, and only that one; with the
// agent down it fails naming the agent's socket and the registry keeps the
// entry (gpuextctl builds no core of its own). `gpuextctl board` leaves the
// board to the agent: without --standalone it refuses, and --standalone
// refuses beside an agent that answers.
func TestOCIGCAsksTheAgent(t *testing.T) {
	ociRequirePrivileged(t, "go")
	l := ociNewLab(t)
	// no periodic round within the test: only gc can drop the entry
	l.WriteConfig(t, "fail-open", map[string]any{"reconcileInterval": "1h"})
	ctl := l.Ctl(t)
	ctrs := newChurnContainers(t, filepath.Join(l.Dir, "b"), "gc", 3)
	for _, c := range ctrs {
		st := specs.State{Version: specs.Version, ID: c.id, Status: "creating", Pid: c.proc.Process.Pid, Bundle: c.bundle}
		data, _ := json.Marshal(&st)
		cmd := exec.Command(l.Hook, "--config", l.Config, "createRuntime")
		cmd.Stdin = bytes.NewReader(data)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("createRuntime hook of %s: %v\n%s", c.id, err, out)
		}
	}
	reg := l.Registry(t)
	registered := func() map[string]bool {
		t.Helper()
		list, err := reg.List()
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for _, tn := range list {
			for _, cg := range tn.Cgroups {
				ids[cg.ContainerID] = true
			}
		}
		return ids
	}
	for _, c := range ctrs {
		if !registered()[c.id] {
			t.Fatalf("container %s not registered by its createRuntime hook", c.id)
		}
	}
	// the first container ends without its poststop (a runc crash)
	gone := ctrs[0]
	gone.proc.Process.Kill() //nolint:errcheck
	gone.proc.Wait()         //nolint:errcheck
	if err := os.Remove(gone.cgroupDir); err != nil {
		t.Fatal(err)
	}

	// no agent: an error naming its socket; the registry is untouched
	l.StopAgent(t)
	out, err := exec.Command(ctl, "--config", l.Config, "gc", "--grace", "0s").CombinedOutput()
	if err == nil || !strings.Contains(string(out), l.AgentSocket) || !strings.Contains(string(out), "no gpuext agent answers") {
		t.Fatalf("gpuextctl gc without an agent: err=%v\n%s\nwant an error naming %s", err, out, l.AgentSocket)
	}
	if !registered()[gone.id] {
		t.Fatalf("gpuextctl gc without an agent changed the registry: %s dropped", gone.id)
	}

	l.StartAgent(t)
	out, err = exec.Command(ctl, "--config", l.Config, "gc", "--grace", "0s").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "dropped 1 stale entries") {
		t.Fatalf("gpuextctl gc: err=%v\n%s\nwant 1 entry dropped", err, out)
	}
	ids := registered()
	if ids[gone.id] {
		t.Errorf("after gc the registry still holds %s, whose cgroup is gone", gone.id)
	}
	for _, c := range ctrs[1:] {
		if !ids[c.id] {
			t.Errorf("gc dropped the live container %s", c.id)
		}
	}
	if !l.LogContains("agent API: gc", `"dropped":1`) {
		t.Errorf("the agent's log has no gc round that dropped 1 entry")
	}
	// a second round finds nothing more
	out, err = exec.Command(ctl, "--config", l.Config, "gc", "--grace", "0s").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "dropped 0 stale entries") {
		t.Errorf("a second gpuextctl gc: err=%v\n%s\nwant 0 dropped", err, out)
	}

	// the board is the agent's
	out, err = exec.Command(ctl, "--config", l.Config, "board").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--standalone") {
		t.Errorf("gpuextctl board: err=%v\n%s\nwant a refusal that names --standalone", err, out)
	}
	out, err = exec.Command(ctl, "--config", l.Config, "board", "--standalone").CombinedOutput()
	if err == nil || !strings.Contains(string(out), l.AgentSocket) {
		t.Errorf("gpuextctl board --standalone beside the agent: err=%v\n%s\nwant a refusal naming %s", err, out, l.AgentSocket)
	}
}
