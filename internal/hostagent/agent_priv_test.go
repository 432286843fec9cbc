package hostagent_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/devrt/board"
	"github.com/gpuext/gpuext/internal/agentapi"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/internal/failmode"
	"github.com/gpuext/gpuext/internal/hostagent"
	"github.com/gpuext/gpuext/lib/testutil"
)

// testConfig is an agent of its own: a pin dir under /sys/fs/bpf, a state
// dir, and an API socket under /tmp (t.TempDir paths can exceed the unix
// socket limit).
func testConfig(t *testing.T) config.Config {
	t.Helper()
	testutil.RequireRoot(t)
	dir, err := os.MkdirTemp("/tmp", "gx-hostagent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	testutil.UnmountUnder(t, dir) // the tenants' accounting dirs (tmpfs), before the removal
	cfg := config.Default()
	cfg.PinDir = fmt.Sprintf("/sys/fs/bpf/gpuext-hostagent-%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() { os.RemoveAll(cfg.PinDir) })
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.DevrtDir = filepath.Join(dir, "devrt")
	cfg.AgentSocket = filepath.Join(dir, "agent", "agent.sock")
	return cfg
}

func quietLog() *logrus.Entry {
	lg := logrus.New()
	lg.SetOutput(io.Discard)
	if os.Getenv("GPUEXT_TEST_LOG") != "" {
		lg.SetOutput(os.Stderr)
	}
	return logrus.NewEntry(lg)
}

// TestAgentStartReconfigureStop: the agent without a runtime (Docker and
// podman hosts) serves its API and publishes the board from Start on; a
// runtime's Reconfigure swaps the core the API serves (a strict fail mode
// then refuses what fail-open admitted) on the same socket; Stop removes
// the socket and keeps the pinned registry.
func TestAgentStartReconfigureStop(t *testing.T) {
	cfg := testConfig(t)
	a := hostagent.New(cfg, quietLog())
	if _, err := a.Core(); !errors.Is(err, hostagent.ErrNotStarted) {
		t.Fatalf("Core before Start: %v, want ErrNotStarted", err)
	}
	if err := a.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			a.Stop()
		}
	})
	first, err := a.Core()
	if err != nil {
		t.Fatalf("Core after Start: %v", err)
	}
	boardFile := filepath.Join(cfg.StateDir, "board", board.FileName)
	if _, err := os.Stat(boardFile); err != nil {
		t.Fatalf("the board is not published after Start: %v", err)
	}
	c := agentapi.NewClient(cfg.AgentSocket, 10*time.Second)
	bad := agentapi.ContainerInfo{ID: "c-bad-key", Name: "c", Runtime: bpf.RuntimeOCIHook,
		Annotations: map[string]string{"policy.gpuext.io": "no-such-policy"}}
	d, err := c.Admit(bad)
	if err != nil || d.Skipped || d.Policy == "no-such-policy" {
		t.Fatalf("fail-open Admit of a bad key through the API: %+v %v, want the default policy", d, err)
	}
	if n, err := c.GC(agentapi.GCRequest{Grace: time.Hour}); err != nil || n != 0 {
		t.Fatalf("gc through the API: %d %v, want 0 dropped (the reservation is within its grace)", n, err)
	}

	if err := a.Reconfigure(`{"failMode":"strict"}`, "test-runtime", "1"); err != nil {
		t.Fatalf("Reconfigure: %v", err)
	}
	second, err := a.Core()
	if err != nil || second == first {
		t.Fatalf("Core after Reconfigure: %p %v, want a new core (was %p)", second, err, first)
	}
	bad.ID = "c-bad-key-2"
	if _, err := c.Admit(bad); !errors.Is(err, failmode.ErrRefused) || !strings.Contains(err.Error(), "no-such-policy") {
		t.Fatalf("strict Admit of a bad key after Reconfigure: %v, want a refusal naming the value", err)
	}
	if _, err := os.Stat(boardFile); err != nil {
		t.Fatalf("the board is gone after Reconfigure: %v", err)
	}
	if err := a.Reconfigure(`{"noSuchField":1}`, "test-runtime", "1"); err == nil || !strings.Contains(err.Error(), "noSuchField") {
		t.Fatalf("Reconfigure with an unknown field: %v, want an error naming it", err)
	}
	if now, _ := a.Core(); now != second {
		t.Fatalf("a refused Reconfigure replaced the core")
	}

	a.Stop()
	stopped = true
	if _, err := os.Lstat(cfg.AgentSocket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the API socket after Stop: %v, want it removed", err)
	}
	if _, err := a.Core(); !errors.Is(err, hostagent.ErrNotStarted) {
		t.Fatalf("Core after Stop: %v, want ErrNotStarted", err)
	}
	reg, err := bpf.OpenRegistry(cfg.PinDir)
	if err != nil {
		t.Fatalf("the registry after Stop: %v", err)
	}
	defer reg.Close()
	tenants, err := reg.List()
	if err != nil || len(tenants) != 1 {
		t.Fatalf("the pinned registry after Stop: %d tenants %v, want the one reservation kept", len(tenants), err)
	}
}

// TestAgentWithoutItsAPIFailsToStart: an agent that cannot serve its API
// (its socket dir is a file) does not run on without it: Start fails with
// an error naming the socket.
func TestAgentWithoutItsAPIFailsToStart(t *testing.T) {
	cfg := testConfig(t)
	notADir := filepath.Join(filepath.Dir(cfg.AgentSocket), "file")
	if err := os.MkdirAll(filepath.Dir(notADir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.AgentSocket = filepath.Join(notADir, "agent.sock")
	a := hostagent.New(cfg, quietLog())
	defer a.Stop()
	if err := a.Start(); err == nil || !strings.Contains(err.Error(), cfg.AgentSocket) {
		t.Fatalf("Start with an agent socket that cannot be served: %v; want an error naming %s", err, cfg.AgentSocket)
	}
}
