package metrics

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/policies"
)

func gather(t *testing.T, r *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

type fakeBoard struct{ last time.Time }

func (b fakeBoard) Publishes() uint64      { return 42 }
func (b fakeBoard) LastPublish() time.Time { return b.last }

// TestAgentCounts: what the core tells its Observer becomes the agent's
// series: outcomes per runtime, the key a bad request named (a key no
// release knows is "other", never the tenant's own text), fail-open per
// step, latency, reconcile results and the board's lag.
func TestAgentCounts(t *testing.T) {
	r := prometheus.NewRegistry()
	a := NewAgent(r)
	nri := admission.ContainerInfo{ID: "c1", Runtime: bpf.RuntimeNRI}
	hook := admission.ContainerInfo{ID: "c2", Runtime: bpf.RuntimeOCIHook}
	badQuota := &policies.KeyError{Key: "quota.gpuext.io/container.web", Value: "lots", Err: policies.ErrBadSize}
	typo := &policies.KeyError{Key: "qouta.gpuext.io\n{evil=\"1\"}", Value: "1", Err: policies.ErrUnknownKey}
	a.Admitted(nri, admission.Decision{Tenant: 1}, nil, 200*time.Microsecond)
	a.Admitted(nri, admission.Decision{Tenant: 2, FailedOpen: true, RequestErr: badQuota}, nil, 300*time.Microsecond)
	a.Admitted(hook, admission.Decision{}, fmt.Errorf("%w: %w", admission.ErrRefused, typo), time.Millisecond)
	a.Admitted(hook, admission.Decision{Skipped: true, FailedOpen: true, Err: errors.New("registry full")}, nil, time.Millisecond)
	a.Registered(nri, admission.Decision{Tenant: 1}, nil)
	a.Registered(hook, admission.Decision{Skipped: true, FailedOpen: true, Err: admission.ErrNoCgroup}, nil)
	a.Reconciled(3, nil, time.Millisecond)
	a.Reconciled(0, errors.New("list"), time.Millisecond)
	a.SetBoard(func() Board { return fakeBoard{last: time.Now().Add(-2 * time.Second)} })
	fams := gather(t, r)
	check := func(name string, want ...string) {
		t.Helper()
		got := series(fams, name)
		var nonzero []string
		for _, s := range got {
			if !strings.HasSuffix(s, ": 0") {
				nonzero = append(nonzero, s)
			}
		}
		if strings.Join(nonzero, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s:\n%s\nwant\n%s", name, strings.Join(nonzero, "\n"), strings.Join(want, "\n"))
		}
	}
	check("gpuext_admissions_total", "outcome=admitted,runtime=containerd: 1", "outcome=default-policy,runtime=containerd: 1",
		"outcome=refused,runtime=oci-hook: 1", "outcome=without-gpuext,runtime=oci-hook: 1")
	check("gpuext_admission_errors_total", "key=none,kind=internal: 2", "key=other,kind=request: 1", "key=quota.gpuext.io,kind=request: 1")
	check("gpuext_fail_open_total", "outcome=default-policy,runtime=containerd,step=admit: 1",
		"outcome=without-gpuext,runtime=oci-hook,step=admit: 1", "outcome=without-gpuext,runtime=oci-hook,step=register: 1")
	check("gpuext_admission_duration_seconds", "runtime=containerd: 2", "runtime=oci-hook: 2")
	check("gpuext_registrations_total", "outcome=admitted,runtime=containerd: 1", "outcome=without-gpuext,runtime=oci-hook: 1")
	check("gpuext_reconcile_runs_total", "result=error: 1", "result=ok: 1")
	check("gpuext_reconcile_dropped_entries_total", ": 3")
	check("gpuext_board_publishes_total", ": 42")
	if age := fams["gpuext_board_publish_age_seconds"].GetMetric()[0].GetGauge().GetValue(); age < 2 || age > 10 {
		t.Errorf("board publish age %v, want about 2 s", age)
	}
}

// TestServer: /metrics over HTTP in Prometheus' text format with the
// agent's, the Go runtime's and the process's metrics; other paths 404.
func TestServer(t *testing.T) {
	r, agent := NewRegistry(&fakeRegistry{tenants: []bpf.Tenant{tenant(1, "ns", "pod", "quota", 1<<30, "app")}}, t.TempDir(), noCore{})
	agent.Admitted(admission.ContainerInfo{Runtime: bpf.RuntimeNRI}, admission.Decision{Tenant: 1}, nil, time.Millisecond)
	s, err := Listen("127.0.0.1:0", r)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	defer s.Close()
	resp, err := http.Get("http://" + s.Addr() + Path)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`gpuext_admissions_total{outcome="admitted",runtime="containerd"} 1`,
		`gpuext_tenant_quota_bytes{container="app",namespace="ns",pod="pod",policy="quota",tenant="1"} 1.073741824e+09`,
		`gpuext_kernel_core_loaded 0`, "process_cpu_seconds_total", "go_goroutines",
		`gpuext_board_publish_age_seconds -1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("content type %q", ct)
	}
	resp, err = http.Get("http://" + s.Addr() + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/debug/pprof/: %d, want 404", resp.StatusCode)
	}
}
