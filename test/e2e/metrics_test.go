package e2e

// The agent's /metrics scraped by a real Prometheus server (built by
// test/lab/install-prometheus.sh), asserting what a test container caused:
// its quota and the allocations the device runtime refused it, through
// containerd + NRI; and the --nri=false agent's admissions through the runc
// wrapper, with a bad key counted by name.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/test/lab"
)

// TestMetricsScrapedByPrometheus: a pod's container with a 1GiB quota
// allocates 512MiB (ok), 2GiB and 1GiB (both over the quota: refused by
// the device runtime over the fake libcuda) and holds. Prometheus, scraping
// the agent that containerd started, sees the container's quota, 2 refused
// allocations, 512MiB used and peak, and the admission.
func TestMetricsScrapedByPrometheus(t *testing.T) {
	port := lab.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	l := startCtdLab(t, "fail-open", map[string]string{"metricsAddress": addr})
	prom := lab.StartPrometheus(t, "gpuext-agent", addr)
	prom.WaitValue(t, 30*time.Second, `up{job="gpuext-agent"}`, 1)

	payload := payloadDir(t, l)
	pod := l.runPod(t, "metrics", map[string]string{"policy.gpuext.io/pod": "quota", "quota.gpuext.io/pod": "1GiB"})
	app := pod.runApp(t, "app", payload, "alloc", "512MiB", "alloc", "2GiB", "alloc", "1GiB", "hold")
	got := pod.waitLines(t, app, 4)
	want := []string{fmt.Sprintf("alloc %d ok", 512<<20), fmt.Sprintf("alloc %d CUDA_ERROR_OUT_OF_MEMORY", 2<<30),
		fmt.Sprintf("alloc %d CUDA_ERROR_OUT_OF_MEMORY", 1<<30), "hold"}
	if strings.Join(got[:4], "\n") != strings.Join(want, "\n") {
		t.Fatalf("app printed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	sel := `{job="gpuext-agent",namespace="gpuext-e2e",pod="metrics",container="app",policy="quota"}`
	q := prom.WaitValue(t, 30*time.Second, "gpuext_tenant_quota_bytes"+sel, 1<<30)
	if q.Labels["tenant"] == "" {
		t.Errorf("quota series without a tenant label: %v", q.Labels)
	}
	prom.WaitValue(t, 30*time.Second, "gpuext_tenant_refused_allocations_total"+sel, 2)
	prom.WaitValue(t, 30*time.Second, "gpuext_tenant_device_memory_used_bytes"+sel, 512<<20)
	prom.WaitValue(t, 30*time.Second, "gpuext_tenant_device_memory_peak_bytes"+sel, 512<<20)
	prom.WaitValue(t, 30*time.Second, `gpuext_tenant_usage_state{job="gpuext-agent",pod="metrics",state="ok"}`, 1)
	// The pod's one container was admitted under its policy, and every
	// admission was timed (how fast is a benchmark's business, not a test's).
	prom.WaitValue(t, 30*time.Second, `gpuext_admissions_total{job="gpuext-agent",runtime="containerd",outcome="admitted"}`, 1)
	prom.WaitValue(t, 30*time.Second, `sum(gpuext_admission_duration_seconds_count{job="gpuext-agent",runtime="containerd"}) == bool sum(gpuext_admissions_total{job="gpuext-agent",runtime="containerd"})`, 1)
	prom.WaitValue(t, 30*time.Second, `gpuext_kernel_core_loaded{job="gpuext-agent"}`, 0)
	// The board publisher runs (at least every 0.1 s while no tenant is latency-critical).
	prom.WaitValue(t, 30*time.Second, `gpuext_board_publish_age_seconds{job="gpuext-agent"} < bool 1`, 1)

	// The pod goes: its tenant's series go at the next scrape.
	pod.remove(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := prom.Query("gpuext_tenant_quota_bytes" + sel)
		if err == nil && len(s) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("removed pod's quota series still scraped: %+v %v", s, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestMetricsAgentWithoutNRI: the agent of a Docker/podman host
// (--nri=false) serves /metrics too. Two containers through the runc
// wrapper: one with a 2GiB quota, one whose quota is malformed (fail-open
// gives it the default policy). Prometheus sees the first's quota, two
// admissions by the wrapper (one admitted, one with the default policy)
// and the bad one's error under its key.
func TestMetricsAgentWithoutNRI(t *testing.T) {
	ociRequirePrivileged(t, "runc", "busybox", "go")
	l := ociNewLab(t)
	addr := fmt.Sprintf("127.0.0.1:%d", lab.FreePort(t))
	l.WriteConfig(t, "fail-open", map[string]any{"metricsAddress": addr}) // restarts the agent
	prom := lab.StartPrometheus(t, "gpuext-agent", addr)
	prom.WaitValue(t, 30*time.Second, `up{job="gpuext-agent"}`, 1)

	good := ociNewBundle(t, l, "mgood", map[string]string{"policy.gpuext.io": "quota", "quota.gpuext.io": "2GiB"}, nil, ociScript)
	if stderr, err := good.runDetached(t, l.Wrapper, "--config", l.Config); err != nil {
		t.Fatalf("gpuext-runc run: %v\n%s", err, stderr)
	}
	good.output(t, "READY")
	bad := ociNewBundle(t, l, "mbad", map[string]string{"policy.gpuext.io": "quota", "quota.gpuext.io": "lots"}, nil, ociScript)
	if stderr, err := bad.runDetached(t, l.Wrapper, "--config", l.Config); err != nil {
		t.Fatalf("gpuext-runc run: %v\n%s", err, stderr)
	}
	bad.output(t, "READY")

	prom.WaitValue(t, 30*time.Second, `gpuext_tenant_quota_bytes{job="gpuext-agent",policy="quota",namespace=""}`, 2<<30)
	prom.WaitValue(t, 30*time.Second, `gpuext_admissions_total{runtime="runc-wrapper",outcome="admitted"}`, 1)
	prom.WaitValue(t, 30*time.Second, `gpuext_admissions_total{runtime="runc-wrapper",outcome="default-policy"}`, 1)
	prom.WaitValue(t, 30*time.Second, `gpuext_admission_errors_total{key="quota.gpuext.io",kind="request"}`, 1)
	prom.WaitValue(t, 30*time.Second, `gpuext_fail_open_total{runtime="runc-wrapper",step="admit",outcome="default-policy"}`, 1)
	prom.WaitValue(t, 30*time.Second, `gpuext_registrations_total{runtime="oci-hook",outcome="admitted"}`, 2)
	good.stop(t)
	bad.stop(t)
}
