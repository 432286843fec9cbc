package board

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Every duration falls in the bucket whose floor is at most it and whose
// next floor is above it; floors grow by at most 1/LatencySub a step.
func TestLatencyBuckets(t *testing.T) {
	for i := 0; i < latBuckets-1; i++ {
		lo, hi := BucketFloor(i), BucketFloor(i+1)
		if hi <= lo || float64(hi-lo)/float64(lo) > 1.0/LatencySub+1e-9 {
			t.Fatalf("bucket %d: floor %v, next %v", i, lo, hi)
		}
		for _, d := range []time.Duration{lo, (lo + hi) / 2, hi - 1} {
			if got := BucketOf(d); got != i {
				t.Fatalf("BucketOf(%v) = %d, want %d (floors %v..%v)", d, got, i, lo, hi)
			}
		}
	}
	if BucketOf(0) != 0 || BucketOf(time.Nanosecond) != 0 || BucketOf(time.Hour) != latBuckets-1 {
		t.Errorf("out of range: %d %d %d", BucketOf(0), BucketOf(time.Nanosecond), BucketOf(time.Hour))
	}
	if BucketFloor(0) != time.Microsecond+24*time.Nanosecond || BucketFloor(latBuckets-1) < 60*time.Millisecond {
		t.Errorf("range %v..%v, want about 1us..67ms", BucketFloor(0), BucketFloor(latBuckets-1))
	}
}

// The p99 of 1000 requests, 990 of 200us and 10 of 5ms, is 200us's
// bucket end; with 11 slow ones it is 5ms's. An empty histogram has none.
func TestQuantile(t *testing.T) {
	var h Histogram
	h[BucketOf(200*time.Microsecond)] = 990
	h[BucketOf(5*time.Millisecond)] = 10
	if got := h.Quantile(0.99); got != BucketFloor(BucketOf(200*time.Microsecond)+1) {
		t.Errorf("p99 = %v, want the end of 200us's bucket", got)
	}
	h[BucketOf(5*time.Millisecond)] = 11
	if got := h.Quantile(0.99); got < 5*time.Millisecond || got > 5700*time.Microsecond {
		t.Errorf("p99 with 11 of 1001 slow = %v, want about 5ms", got)
	}
	if (Histogram{}).Quantile(0.99) != 0 {
		t.Error("empty histogram has a p99")
	}
}

// A tenant writes the counters: saturated, wrapped or shrinking values
// give no panic, no wrapped count and no interval larger than the file.
func TestHostileHistogram(t *testing.T) {
	var h, prev Histogram
	for i := range h {
		h[i] = math.MaxUint64 - uint64(i)
		prev[i] = uint64(i) * 7
	}
	if h.Count() != math.MaxUint64 || h.Add(h).Count() != math.MaxUint64 {
		t.Errorf("count wrapped: %d", h.Count())
	}
	if q := h.Quantile(0.99); q <= 0 {
		t.Errorf("p99 of a saturated histogram: %v", q)
	}
	shrunk := prev.Sub(h) // counters went down: the file was made anew
	if shrunk != prev {
		t.Errorf("a shrinking counter counts from zero: got %v", shrunk[:4])
	}
}

// ReadUsage reads the latency fields the device runtime writes.
func TestReadUsageLatency(t *testing.T) {
	root := t.TempDir()
	acct := filepath.Join(root, "7")
	if err := os.Mkdir(acct, 0o755); err != nil {
		t.Fatal(err)
	}
	var h Histogram
	h[3], h[100] = 5, 9
	want := Usage{TenantID: 7, Launches: 40, Synced: 33, LCRequests: 14, LCRequestTime: 3 * time.Millisecond, Latency: h}
	if err := os.WriteFile(filepath.Join(acct, UsageFileName), EncodeUsage(want), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadUsage(acct)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("ReadUsage = %+v, want %+v", got, want)
	}
}
