package metrics

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/bpf"
	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/devrt/board"
	"github.com/gpuext/gpuext/lib/testutil"
)

// BenchmarkScrape200Tenants is the scrape cost the issue asks for: 200
// tenants in a real pinned registry (root), each with a usage file; none,
// or 50 of them, with launch-stats and launch-latency probes (one
// process's copy each: 0.5 MiB of per-warp counters), scraped over HTTP as Prometheus does (gzip accepted). It reports
// the process's CPU per scrape (user + system, getrusage: the collector,
// the map walks, the file reads and the encoding together, which is what
// the agent spends) and the response size, uncompressed and as sent.
func BenchmarkScrape200Tenants(b *testing.B) {
	for _, withProbes := range []int{0, 50} {
		b.Run(fmt.Sprintf("probes=%d", withProbes), func(b *testing.B) { benchScrape(b, 200, withProbes) })
	}
}

func benchScrape(b *testing.B, tenants, withProbes int) {
	testutil.RequireRoot(b)
	pinDir := fmt.Sprintf("/sys/fs/bpf/gpuext-bench-metrics-%d", time.Now().UnixNano())
	reg, err := bpf.OpenRegistry(pinDir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { reg.Close(); os.RemoveAll(pinDir) })
	state := b.TempDir()
	for i := range tenants {
		var cfg bpf.GpuextTenantConfig
		cfg.QuotaBytes = uint64(i+1) << 28
		id, err := reg.Reserve(fmt.Sprintf("nri/ctr/%064d", i), "quota", cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := reg.Attach(id, bpf.CgroupEntry{CgroupID: cgroup.ID(1_000_000 + i), CgroupPath: fmt.Sprintf("/kubepods/besteffort/pod%d/%064d", i, i),
			ContainerID: fmt.Sprintf("%064d", i), ContainerName: fmt.Sprintf("worker-%d", i), PodName: fmt.Sprintf("train-%d-abcde", i),
			PodNamespace: "research", Runtime: bpf.RuntimeNRI}); err != nil {
			b.Fatal(err)
		}
		dir := filepath.Join(state, "acct", fmt.Sprint(id))
		os.MkdirAll(dir, 0o777)
		u := board.Usage{TenantID: uint64(id), PeakBytes: 1 << 30, RefusedAllocs: uint64(i), Launches: 1e6}
		if err := os.WriteFile(filepath.Join(dir, board.UsageFileName), board.EncodeUsage(u), 0o666); err != nil {
			b.Fatal(err)
		}
		if i < withProbes {
			probeTenant(b, state, id, 1)
		}
	}
	r, _ := NewRegistry(reg, state, noCore{})
	s, err := Listen("127.0.0.1:0", r)
	if err != nil {
		b.Fatal(err)
	}
	go s.Serve()
	b.Cleanup(func() { s.Close() })
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	scrape := func() (plain, sent int) {
		req, _ := http.NewRequest("GET", "http://"+s.Addr()+Path, nil)
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("scrape: %d %v", resp.StatusCode, err)
		}
		if resp.Header.Get("Content-Encoding") != "gzip" {
			return len(raw), len(raw)
		}
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, zr)
		return int(n), len(raw)
	}
	plain, sent := scrape()
	runtime.GC()
	var before, after unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &before)
	b.ResetTimer()
	for range b.N {
		scrape()
	}
	b.StopTimer()
	unix.Getrusage(unix.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano()-before.Utime.Nano()) + time.Duration(after.Stime.Nano()-before.Stime.Nano())
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/scrape")
	b.ReportMetric(float64(plain), "bytes/scrape")
	b.ReportMetric(float64(sent), "gzip-bytes/scrape")
}
