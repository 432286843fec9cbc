package plugin_test

import (
	"context"
	"sort"
	"testing"
	"time"
)

// BenchmarkAdmission measures what the plugin adds to one container's
// creation: NRI CreateContainer (policy, tenant, injection) plus
// PostCreateContainer (cgroup -> registry), through the nri module's runtime
// side over the real ttrpc connection, on real cgroups and pinned maps.
// Run with -benchtime=1000x for the p50/p99 over 1,000 containers.
func BenchmarkAdmission(b *testing.B) {
	f := newFixture(b)
	ctx := context.Background()
	rp := newRuntimePeer(b, f.sock)
	s := startPlugin(b, rp, f.cfg, f.sock)
	defer s.Stop()

	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		pod, ctr, _ := f.mkContainer(b, i)
		b.StartTimer()
		t0 := time.Now()
		if _, err := rp.create(ctx, pod, ctr); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(pct(0.50), "p50-us")
	b.ReportMetric(pct(0.99), "p99-us")
	b.ReportMetric(pct(1.0), "max-us")
}
