package lab

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/lib/testutil"
)

// Prometheus is a real Prometheus server (built by install-prometheus.sh)
// that StartPrometheus started for one test.
type Prometheus struct {
	URL string // http://127.0.0.1:PORT
	Dir string
	Log string
}

// FreePort is a TCP port on 127.0.0.1 nobody listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// StartPrometheus starts a Prometheus server that scrapes targets
// (host:port, path /metrics) every second as job, with its data in a
// fresh directory, and stops it in t.Cleanup. Without the binary it
// skips, or fails when CI=true (make deps builds it).
func StartPrometheus(t testing.TB, job string, targets ...string) *Prometheus {
	t.Helper()
	bin := filepath.Join(BinDir(), "prometheus")
	if _, err := os.Stat(bin); err != nil {
		testutil.SkipOrFail(t, "no Prometheus server at %s (test/lab/install-prometheus.sh builds it): %v", bin, err)
	}
	dir, err := os.MkdirTemp("", "gpuext-prometheus-")
	if err != nil {
		t.Fatal(err)
	}
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n"+
		"  - job_name: %s\n    static_configs:\n      - targets: [%s]\n", strconv.Quote(job), strings.Join(quoted, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	port := FreePort(t)
	p := &Prometheus{URL: fmt.Sprintf("http://127.0.0.1:%d", port), Dir: dir, Log: filepath.Join(dir, "prometheus.log")}
	logf, err := os.Create(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logf.Close()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt) //nolint:errcheck
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }() //nolint:errcheck
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill() //nolint:errcheck
			<-done
		}
		if t.Failed() {
			t.Logf("prometheus log (tail):\n%s", Tail(p.Log, 30))
		}
		os.RemoveAll(dir)
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(p.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after 60 s: %v\n%s", err, Tail(p.Log, 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Sample is one element of an instant vector.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Query runs an instant query through the HTTP API (/api/v1/query) and
// returns its vector.
func (p *Prometheus) Query(expr string) ([]Sample, error) {
	resp, err := http.Get(p.URL + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("query %q: %w: %s", expr, err, body)
	}
	if r.Status != "success" || r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %q: status %s, result type %q: %s", expr, r.Status, r.Data.ResultType, r.Error)
	}
	out := make([]Sample, 0, len(r.Data.Result))
	for _, s := range r.Data.Result {
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return nil, fmt.Errorf("query %q: value %v: %w", expr, s.Value[1], err)
		}
		out = append(out, Sample{Labels: s.Metric, Value: v})
	}
	return out, nil
}

// WaitValue polls expr until it gives exactly one sample whose value is
// want, and fails the test with the last answer after timeout.
func (p *Prometheus) WaitValue(t testing.TB, timeout time.Duration, expr string, want float64) Sample {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, err := p.Query(expr)
		if err == nil && len(got) == 1 && got[0].Value == want {
			return got[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus: %s = %+v (err %v), want one sample of value %v", expr, got, err, want)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
