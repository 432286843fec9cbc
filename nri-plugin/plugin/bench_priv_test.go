package plugin_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/gpuext/gpuext/nri-plugin/plugin"
)

// timedPlugin times the plugin's own handling of CreateContainer and
// StartContainer (no ttrpc, no runtime side).
type timedPlugin struct {
	*plugin.Plugin
	mu      sync.Mutex
	current time.Duration
}

func (tp *timedPlugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	t0 := time.Now()
	adj, upd, err := tp.Plugin.CreateContainer(ctx, pod, ctr)
	tp.add(time.Since(t0))
	return adj, upd, err
}

func (tp *timedPlugin) StartContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	t0 := time.Now()
	err := tp.Plugin.StartContainer(ctx, pod, ctr)
	tp.add(time.Since(t0))
	return err
}

func (tp *timedPlugin) add(d time.Duration) {
	tp.mu.Lock()
	tp.current += d
	tp.mu.Unlock()
}

func (tp *timedPlugin) take() time.Duration {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	d := tp.current
	tp.current = 0
	return d
}

// BenchmarkAdmission measures what the plugin adds to one container's
// creation: NRI CreateContainer (policy, tenant, injection) plus
// StartContainer (cgroup -> registry), on real cgroups and pinned maps.
// It reports the plugin's handling time and the round trip the runtime sees
// through the nri module's runtime side (ttrpc included).
// Run with -benchtime=1000x for the p50/p99 over 1,000 containers.
func BenchmarkAdmission(b *testing.B) {
	f := newFixture(b)
	ctx := context.Background()
	rp := newRuntimePeer(b, f.sock)
	var tp *timedPlugin
	s := startPlugin(b, rp, f.cfg, f.sock, func(p *plugin.Plugin) any { tp = &timedPlugin{Plugin: p}; return tp })
	defer s.Stop()

	handler := make([]time.Duration, 0, b.N)
	roundTrip := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		pod, ctr, _ := f.mkContainer(b, i)
		tp.take()
		b.StartTimer()
		t0 := time.Now()
		if _, err := rp.create(ctx, pod, ctr); err != nil {
			b.Fatal(err)
		}
		roundTrip = append(roundTrip, time.Since(t0))
		handler = append(handler, tp.take())
	}
	b.StopTimer()
	report := func(lat []time.Duration, unit string) {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
		b.ReportMetric(pct(0.50), "p50-"+unit)
		b.ReportMetric(pct(0.99), "p99-"+unit)
	}
	report(handler, "plugin-us")
	report(roundTrip, "roundtrip-us")
}
