//go:build kernellab

package guest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/agent"
	"github.com/gpuext/gpuext/internal/agentapi"
	"github.com/gpuext/gpuext/internal/config"
)

// Changing a running tenant's policy, kernel half: the path of `gpuextctl
// tenants set-policy` (the agent client, the agent's /v1/set-policy on its
// unix socket, admission.Core.SetPolicy, the registry) runs here against the
// real gpuext core and gpusim, with the tenant admitted and registered as a
// container would be.

// setPolicyLab is an admission core over the lab's registry and catalog
// (with the lab's policy directory) and an agent serving it on a socket.
type setPolicyLab struct {
	core     *admission.Core
	stateDir string
	client   *agentapi.Client
}

func newSetPolicyLab(t *testing.T, reg *bpf.Registry) *setPolicyLab {
	t.Helper()
	cat, err := admission.Catalog(config.Config{KernelPolicyDir: labPolicyDir})
	if err != nil {
		t.Fatalf("catalog with %s: %v", labPolicyDir, err)
	}
	res, err := cgroup.NewResolver("/")
	if err != nil {
		t.Fatal(err)
	}
	l := &setPolicyLab{stateDir: t.TempDir()}
	lg := logrus.New()
	lg.SetOutput(&strings.Builder{})
	l.core, err = admission.New(admission.Config{FailMode: admission.FailClosed, StateDir: l.stateDir, DevrtDir: t.TempDir()},
		reg, cat, nil, res, logrus.NewEntry(lg))
	if err != nil {
		t.Fatal(err)
	}
	sockDir, err := os.MkdirTemp("/tmp", "setpol-agent-")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(sockDir, "agent.sock")
	srv, err := agent.Listen(sock, func() (agent.Core, error) { return l.core, nil }, logrus.NewEntry(lg))
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(func() { srv.Close(); os.RemoveAll(sockDir) })
	l.client = agentapi.NewClient(sock, agentapi.DefaultTimeout)
	return l
}

// admit admits and registers container name with policy (its
// policy.gpuext.io annotation) in a cgroup of its own, and returns the
// cgroup dir and the decision.
func (l *setPolicyLab) admit(t *testing.T, name, policy string) (string, admission.Decision) {
	t.Helper()
	dir := filepath.Join("/sys/fs/cgroup", name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("mkdir cgroup: %v", err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	info := admission.ContainerInfo{ID: name, Name: name, Runtime: bpf.RuntimeRuncWrapper,
		Annotations: map[string]string{"policy.gpuext.io": policy}, CgroupsPath: "/" + name}
	d, err := l.core.Admit(info)
	if err != nil {
		t.Fatalf("admit %s: %v", name, err)
	}
	if _, _, err := l.core.Register(info, d); err != nil {
		t.Fatalf("register %s: %v", name, err)
	}
	t.Cleanup(func() { l.core.Remove(info) })
	return dir, d
}

func (l *setPolicyLab) settings(t *testing.T, id bpf.TenantID) tenantcfg.Settings {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(admission.TenantDir(l.stateDir, uint64(id)), tenantcfg.FileName))
	if err != nil {
		t.Fatal(err)
	}
	s, err := tenantcfg.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSetPolicyRunningTenant: a container admitted with batch (FIFO
// eviction) runs an eviction loop on its gpusim context; `set-policy
// vector-search` through the agent switches it to LFU. Every eviction
// during the change ran one of the two policies (none ran stock, none had
// no tenant); every eviction that started after the agent answered ran LFU
// and took the order a tenant admitted with vector-search takes; FIFO never
// came back after the first LFU; the context was never recreated. A
// refused change (an unknown policy) leaves LFU in place.
func TestSetPolicyRunningTenant(t *testing.T) {
	requireLab(t)
	reg := openRegistry(t)
	defer attach(t, "fifo").Close()
	defer attach(t, "lfu").Close()
	l := newSetPolicyLab(t, reg)

	ctrlCg, _ := l.admit(t, "setpol-ctrl", "vector-search")
	ctrl := gpuCtx(t, "ctx-setpol-ctrl", ctrlCg)
	workload(t, ctrl)
	want := evict(t, ctrl)
	if want.ops != "lfu" || want.order == fifoOrder {
		t.Fatalf("a vector-search tenant's eviction: ops %q order [%s], want lfu and not FIFO's [%s]", want.ops, want.order, fifoOrder)
	}

	cg, d := l.admit(t, "setpol-live", "batch")
	ctx := gpuCtx(t, "ctx-setpol-live", cg)
	workload(t, ctx)
	expect(t, "batch tenant before the change", evict(t, ctx), "fifo", fifoOrder)
	if s := l.settings(t, d.Tenant); s.Class != tenantcfg.ClassBestEffort {
		t.Fatalf("batch tenant's settings.bin class %v, want best-effort", s.Class)
	}

	type result struct {
		ops, order  string
		tenant      uint32
		afterAnswer bool
	}
	var answered atomic.Bool
	results := make(chan result, 1<<16)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			r := result{afterAnswer: answered.Load()}
			if err := os.WriteFile(ctx+"/ctl", []byte("evict"), 0); err != nil {
				results <- result{ops: "error: " + err.Error()}
				return
			}
			data, _ := os.ReadFile(ctx + "/evict")
			for _, line := range strings.Split(string(data), "\n") {
				k, v, _ := strings.Cut(line, " ")
				switch k {
				case "ops":
					r.ops = v
				case "order":
					r.order = v
				case "tenant":
					n, _ := strconv.ParseUint(v, 10, 32)
					r.tenant = uint32(n)
				}
			}
			results <- r
		}
	}()
	var seen []result
	for len(seen) < 20 {
		seen = append(seen, <-results)
	}
	start := time.Now()
	nd, err := l.client.SetPolicy(admission.PolicyChange{Tenant: d.TenantKey, Policy: "vector-search"})
	answered.Store(true)
	if err != nil {
		close(stop)
		<-done
		t.Fatalf("set-policy %s vector-search through the agent: %v", d.TenantKey, err)
	}
	t.Logf("set-policy answered in %v: tenant %d policy %s", time.Since(start), nd.Tenant, nd.Policy)
	for n := 0; n < 20; {
		r := <-results
		seen = append(seen, r)
		if r.afterAnswer {
			n++
		}
	}
	close(stop)
	<-done
	close(results)
	for r := range results {
		seen = append(seen, r)
	}

	var fifo, lfu, after int
	for i, r := range seen {
		switch {
		case r.tenant != uint32(d.Tenant):
			t.Fatalf("eviction %d of %d ran for tenant %d, want %d every time (ops %q)", i, len(seen), r.tenant, d.Tenant, r.ops)
		case r.ops == "fifo" && r.order == fifoOrder:
			fifo++
			if lfu > 0 {
				t.Errorf("eviction %d: FIFO after an LFU eviction", i)
			}
			if r.afterAnswer {
				t.Errorf("eviction %d: FIFO although the agent had answered the change", i)
			}
		case r.ops == "lfu" && r.order == want.order:
			lfu++
		default:
			t.Fatalf("eviction %d of %d: ops %q order [%s], neither batch's FIFO nor vector-search's LFU [%s]", i, len(seen), r.ops, r.order, want.order)
		}
		if r.afterAnswer {
			after++
		}
	}
	if fifo == 0 {
		t.Errorf("no FIFO eviction in the loop before the change")
	}
	if after == 0 || lfu < after {
		t.Errorf("%d evictions after the answer, %d by LFU: want all of them, and some", after, lfu)
	}
	t.Logf("%d evictions during the change (%d after the answer), all by the tenant's FIFO then its LFU", len(seen), after)

	if s := l.settings(t, d.Tenant); s.Class != tenantcfg.ClassStandard {
		t.Errorf("settings.bin class %v after the change, want standard (vector-search)", s.Class)
	}
	if rec, err := reg.TenantRecord(d.Tenant); err != nil || rec.Policy != "vector-search" {
		t.Errorf("registry record after the change: %v policy %q, want vector-search", err, rec.Policy)
	}
	if _, err := os.Stat(ctx); err != nil {
		t.Errorf("the tenant's context is gone: %v", err)
	}

	_, err = l.client.SetPolicy(admission.PolicyChange{Tenant: d.TenantKey, Policy: "no-such-policy"})
	if err == nil || !strings.Contains(err.Error(), "no-such-policy") {
		t.Errorf("set-policy to an unknown policy: %v, want a refusal naming it", err)
	}
	expect(t, "after a refused change", evict(t, ctx), "lfu", want.order)
}
