package board

import (
	"math"
	"sort"
	"sync/atomic"
	"time"
)

// Histogram is a latency-critical tenant's request durations as its
// device runtime counts them (gpuext_devrt_shm.h, struct
// gpuext_devrt_lc_latency): log-linear buckets, LatencySub per doubling
// from 2^latMinShift ns. Counters only grow; Sub gives an interval's.
type Histogram [latBuckets]uint64

// LatencySub is how many buckets a doubling of the duration spans.
const LatencySub = latSub

// BucketFloor is the shortest duration bucket i holds, as the header's
// gpuext_devrt_lat_floor computes it (generated into layout_gen.go).
func BucketFloor(i int) time.Duration { return time.Duration(latFloorNs[i]) }

// BucketOf is the bucket a duration counts in: the last whose floor is at
// most it (the header's gpuext_devrt_lat_bucket; the first bucket also
// holds what is shorter than its floor). For tests and the host's figures.
func BucketOf(d time.Duration) int {
	ns := uint64(max(d, 0))
	i := sort.Search(latBuckets, func(i int) bool { return latFloorNs[i] > ns }) - 1
	return max(i, 0)
}

// Sub is h minus an earlier reading of the same counters. A counter that
// went down (the tenant's file was made anew) counts from zero.
func (h Histogram) Sub(prev Histogram) Histogram {
	var d Histogram
	for i := range h {
		if h[i] >= prev[i] {
			d[i] = h[i] - prev[i]
		} else {
			d[i] = h[i]
		}
	}
	return d
}

// Add is h plus o, bucket by bucket, saturating (the counters are a
// tenant's to write: any value may be there).
func (h Histogram) Add(o Histogram) Histogram {
	for i := range h {
		h[i] = satAdd(h[i], o[i])
	}
	return h
}

// Count is the number of durations counted (saturating).
func (h Histogram) Count() uint64 {
	var n uint64
	for _, c := range h {
		n = satAdd(n, c)
	}
	return n
}

func satAdd(a, b uint64) uint64 {
	if a+b < a {
		return math.MaxUint64
	}
	return a + b
}

// Quantile is an upper bound of the q-quantile (0 < q <= 1): the end of
// the bucket the q-th duration falls in, so "p99 <= target" is never
// claimed on a bucket's optimism. 0 when nothing was counted.
func (h Histogram) Quantile(q float64) time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	rank := n // the ceil(q*n)-th duration
	if r := math.Ceil(q * float64(n)); r < float64(n) {
		rank = max(1, uint64(r))
	}
	var seen uint64
	for i, c := range h {
		seen = satAdd(seen, c)
		if seen >= rank {
			if i == latBuckets-1 {
				return BucketFloor(i)
			}
			return BucketFloor(i + 1)
		}
	}
	return BucketFloor(latBuckets - 1)
}

// Pace values of the board (SetControl).
const (
	PaceNone    = paceNone    // best-effort launches go at once
	PaceRequest = paceRequest // they wait while a latency-critical request runs
	// PaceHold: they wait while the pace stays so, at most PaceHoldMax
	// (the controller measuring a latency-critical tenant alone).
	PaceHold = paceHold
)

// Control is what the host latency controller publishes for best-effort
// processes (docs/priority-control.md).
type Control struct {
	// SMPercent: the MPS share a best-effort context created now gets
	// (1..100; 0: the policy's).
	SMPercent uint32
	// Pace: PaceNone, PaceRequest or PaceHold.
	Pace uint32
	// PaceGPUs: with Pace, the host GPUs whose best-effort tenants are
	// paced (bit per index; 0: every GPU).
	PaceGPUs uint64
	// PaceDepth: with Pace, at most this many of a paced process's
	// launches unfinished when it launches again (1..PaceDepthMax; 0: no
	// bound).
	PaceDepth uint32
}

// PaceDepthMax is the largest bound on a paced process's unfinished launches.
const PaceDepthMax = paceDepthMax

// PaceHoldMax is the longest a best-effort launch waits under PaceHold.
const PaceHoldMax = time.Duration(paceHoldMaxNs)

// SetControl publishes the host latency controller's choices.
func (p *Publisher) SetControl(c Control) {
	// the GPUs and the depth before the pace that uses them
	atomic.StoreUint64(p.u64(boardOffBEPaceGPUs), c.PaceGPUs)
	atomic.StoreUint32(p.u32(boardOffBEPaceDepth), min(c.PaceDepth, PaceDepthMax))
	atomic.StoreUint32(p.u32(boardOffBESMPercent), c.SMPercent)
	atomic.StoreUint32(p.u32(boardOffBEPace), c.Pace)
	atomic.AddUint64(p.u64(boardOffSeq), 1)
}

// Control is what SetControl last published.
func (p *Publisher) Control() Control {
	return Control{SMPercent: atomic.LoadUint32(p.u32(boardOffBESMPercent)), Pace: atomic.LoadUint32(p.u32(boardOffBEPace)),
		PaceGPUs: atomic.LoadUint64(p.u64(boardOffBEPaceGPUs)), PaceDepth: atomic.LoadUint32(p.u32(boardOffBEPaceDepth))}
}
