package agent

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/internal/agentapi"
	"github.com/gpuext/gpuext/lib/testutil"
)

// roundCore records the reconcile rounds it is asked for and answers with
// dropped and err; the rest of the core is not reached here (the real
// core's Reconcile against a pinned registry: test/e2e TestOCIGCAsksTheAgent).
type roundCore struct {
	Core
	mu      sync.Mutex
	rounds  []string
	dropped int
	err     error
}

func (c *roundCore) Reconcile(grace time.Duration, runtimes ...bpf.Runtime) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for _, r := range runtimes {
		names = append(names, r.String())
	}
	slices.Sort(names)
	c.rounds = append(c.rounds, grace.String()+" "+strings.Join(names, ","))
	return c.dropped, c.err
}

// TestGCThroughTheAPI: gpuextctl's gc request reaches the core's reconcile
// with its grace and runtimes (the OCI paths; with All, NRI too), and the
// count comes back, beside the round's error when it has one; a negative
// grace is refused by name without a round; a core that cannot reconcile
// says so.
func TestGCThroughTheAPI(t *testing.T) {
	testutil.RequireRoot(t) // the server answers root peers only
	core := &roundCore{dropped: 3}
	sock := filepath.Join(sockDir(t), "agent", "agent.sock")
	s, err := Listen(sock, func() (Core, error) { return core, nil }, logrus.NewEntry(logrus.New()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	go s.Serve() //nolint:errcheck
	c := agentapi.NewClient(sock, 5*time.Second)

	if n, err := c.GC(agentapi.GCRequest{Grace: 10 * time.Minute}); n != 3 || err != nil {
		t.Fatalf("GC: %d %v, want 3 dropped", n, err)
	}
	if n, err := c.GC(agentapi.GCRequest{All: true}); n != 3 || err != nil {
		t.Fatalf("GC --all: %d %v, want 3 dropped", n, err)
	}
	if _, err := c.GC(agentapi.GCRequest{Grace: -time.Second}); err == nil || !strings.Contains(err.Error(), "grace -1s") {
		t.Fatalf("GC with a negative grace: %v, want an error naming the grace", err)
	}
	core.err = errors.New("list registry: boom")
	if n, err := c.GC(agentapi.GCRequest{}); n != 3 || err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("GC whose round fails: %d %v, want 3 dropped and the round's error", n, err)
	}
	oci := []string{bpf.RuntimeOCIHook.String(), bpf.RuntimeRuncWrapper.String()}
	slices.Sort(oci)
	all := append(slices.Clone(oci), bpf.RuntimeNRI.String())
	slices.Sort(all)
	want := []string{"10m0s " + strings.Join(oci, ","), "0s " + strings.Join(all, ","), "0s " + strings.Join(oci, ",")}
	if !slices.Equal(core.rounds, want) {
		t.Fatalf("rounds %q, want %q", core.rounds, want)
	}

	// a core without Reconcile
	sock2 := filepath.Join(sockDir(t), "agent", "agent.sock")
	s2, err := Listen(sock2, func() (Core, error) { return struct{ Core }{}, nil }, logrus.NewEntry(logrus.New()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	go s2.Serve() //nolint:errcheck
	if _, err := agentapi.NewClient(sock2, 5*time.Second).GC(agentapi.GCRequest{}); err == nil ||
		!strings.Contains(err.Error(), "cannot collect") {
		t.Fatalf("GC of a core without Reconcile: %v", err)
	}
}
