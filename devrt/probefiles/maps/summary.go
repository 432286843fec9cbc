package maps

import (
	"encoding/binary"
	"math"
	"math/bits"
	"slices"
	"sort"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/programs"
)

// ProbeSummary is what one probe counted for a tenant, rendered through the
// probe's catalog views.
type ProbeSummary struct {
	Name string `json:"name"`
	// Counters: the named entries of counters views.
	Counters map[string]uint64 `json:"counters,omitempty"`
	// Means: sum/count of counters views (absent when count is 0).
	Means map[string]float64 `json:"means,omitempty"`
	// InFlight: means not computed because the reading was taken while
	// what they measure was still running (Mean.InFlight).
	InFlight []string `json:"inFlight,omitempty"`
	// SMs: the sm-histogram view.
	SMs *SMSummary `json:"sms,omitempty"`
	// Histograms: log2-histogram views by map name.
	Histograms map[string]HistSummary `json:"histograms,omitempty"`
	// Hashes: hash views by map name.
	Hashes map[string]HashSummary `json:"hashes,omitempty"`
	// Records: records views (ring buffers) by map name.
	Records map[string]RecordsSummary `json:"records,omitempty"`
	// PerThread: per-thread views by map name.
	PerThread map[string]PerThreadSummary `json:"perThread,omitempty"`
	// Missing: the probe's maps no file had (no patched image ran yet).
	Missing []string `json:"missing,omitempty"`
}

// SMSummary summarises a per-SM histogram.
type SMSummary struct {
	Used  int    `json:"used"`  // SMs with a non-zero count
	Min   uint64 `json:"min"`   // fewest counts of a used SM
	Max   uint64 `json:"max"`   // most counts of an SM
	MinSM int    `json:"minSm"` // an SM with Min
	MaxSM int    `json:"maxSm"` // an SM with Max
	Total uint64 `json:"total"`
}

// HistSummary summarises a log2 histogram.
type HistSummary struct {
	Count uint64 `json:"count"`
	Unit  string `json:"unit,omitempty"`
	// P50 and P99 are estimates: the rank's position inside its power-of-two
	// bucket, interpolated linearly. Zero when Count is 0.
	P50 uint64 `json:"p50"`
	P99 uint64 `json:"p99"`
	Max uint64 `json:"max"` // upper bound of the highest non-empty bucket
}

// HashSummary summarises a hash map through its view (programs.ViewHash).
type HashSummary struct {
	// Keys: distinct keys over the tenant's images.
	Keys int `json:"keys"`
	// Sums: each unsigned value field summed over every key (what the
	// metrics export; per-key series would let a tenant make any number).
	Sums map[string]uint64 `json:"sums,omitempty"`
	// Top: the view's Top entries, by the value's first unsigned field
	// (most first; then by key bytes), its numbers summed over images.
	Top []HashEntry `json:"top"`
	// Omitted: keys past Top.
	Omitted int `json:"omitted,omitempty"`
	// BadSize: entries whose key or value is not the view's size (a file
	// of another build of the probe).
	BadSize int `json:"badSize,omitempty"`
}

// HashEntry is one decoded key and value (field name -> value, see
// programs.DecodeFields).
type HashEntry struct {
	Key   map[string]any `json:"key"`
	Value map[string]any `json:"value"`
}

// RecordsSummary summarises a ring buffer through its view (programs.ViewRecords).
type RecordsSummary struct {
	// Count: records the tenant's images hold; Dropped: those that did not fit.
	Count   uint64 `json:"count"`
	Dropped uint64 `json:"dropped"`
	// Last: the view's Last records, oldest first: the records of each
	// image in the order written, images in the order of their files
	// (process key, image index).
	Last []map[string]any `json:"last"`
	// BadSize: kept records whose size is not the view's record size.
	BadSize int `json:"badSize,omitempty"`
}

// PerThreadSummary summarises a per-thread array through its view
// (programs.ViewPerThread): row g is thread g of a launch (its linear index
// in the grid), its values summed over the tenant's images.
type PerThreadSummary struct {
	// Rows: the map's rows, the threads of a launch it has room for.
	Rows int `json:"rows"`
	// NoRow: accesses by threads past the last row (each one a count the
	// map is short of), summed over images.
	NoRow uint64 `json:"noRow"`
	// Entries: the view's fields, in order.
	Entries []ThreadEntry `json:"entries"`
}

// ThreadEntry is one entry of a per-thread map over its rows.
type ThreadEntry struct {
	Name string `json:"name"`
	// Used: rows whose value is not 0; Sum: over every row.
	Used int    `json:"rowsUsed"`
	Sum  uint64 `json:"sum"`
	// Min and Max: the fewest and most of a used row, and the first row
	// with each (-1 when no row is used).
	Min    uint64 `json:"min"`
	Max    uint64 `json:"max"`
	MinRow int    `json:"minRow"`
	MaxRow int    `json:"maxRow"`
	// Log2: bucket b counts the used rows whose value has bit length b
	// ([2^(b-1), 2^b)); up to the highest non-empty bucket.
	Log2 []uint64 `json:"log2"`
}

// rowsOf reads entry i of every row of a per-thread map of u64 values.
func rowsOf(m Map, i uint32) []uint64 {
	l := m.Layout
	d := m.Bytes[abi.MapHdrSize:]
	out := make([]uint64, l.NBuckets)
	for g := range out {
		off := (uint64(g)*uint64(l.MaxEntries) + uint64(i)) * uint64(l.Stride)
		out[g] = binary.LittleEndian.Uint64(d[off:])
	}
	return out
}

// addRows adds a per-thread map's rows (descriptor checked by Decode:
// the data holds every row and the no-row count) to the aggregate.
func (a *Aggregate) addRows(m Map) {
	l := m.Layout
	if l.ValueSize != 8 || uint64(len(m.Bytes)) < abi.MapHdrSize+l.DataSize {
		return
	}
	n := min(l.MaxEntries, programs.MaxPerThreadFields)
	if a.Rows == nil {
		a.Rows = make([][]uint64, n)
		for i := range a.Rows {
			a.Rows[i] = make([]uint64, l.NBuckets)
		}
	}
	for i := uint32(0); i < n && int(i) < len(a.Rows); i++ {
		for g, v := range rowsOf(m, i) {
			if g < len(a.Rows[i]) {
				a.Rows[i][g] = addSat(a.Rows[i][g], v)
			}
		}
	}
	a.NoRow = addSat(a.NoRow, abi.PerThreadNoRow(l, m.Bytes[abi.MapHdrSize:]))
}

// perThreadSummary renders the rows of the view's fields.
func perThreadSummary(v programs.View, agg *Aggregate) PerThreadSummary {
	s := PerThreadSummary{Rows: int(agg.Layout.NBuckets), NoRow: agg.NoRow, Entries: []ThreadEntry{}}
	for i, name := range v.Fields {
		e := ThreadEntry{Name: name, MinRow: -1, MaxRow: -1, Log2: []uint64{}}
		if i < len(agg.Rows) {
			for g, c := range agg.Rows[i] {
				if c == 0 {
					continue
				}
				e.Used++
				e.Sum = addSat(e.Sum, c)
				if e.MinRow < 0 || c < e.Min {
					e.Min, e.MinRow = c, g
				}
				if c > e.Max {
					e.Max, e.MaxRow = c, g
				}
				b := bits.Len64(c)
				for len(e.Log2) <= b {
					e.Log2 = append(e.Log2, 0)
				}
				e.Log2[b]++
			}
		}
		s.Entries = append(s.Entries, e)
	}
	return s
}

// Summarize renders the tenant's maps through the views of the named probes.
func Summarize(t *Tenant, cat *programs.Catalog, names []string) []ProbeSummary {
	out := []ProbeSummary{}
	for _, name := range names {
		p, ok := cat.Get(name)
		if !ok {
			out = append(out, ProbeSummary{Name: name, Missing: []string{"(not in the probe catalog)"}})
			continue
		}
		s := ProbeSummary{Name: name}
		for _, v := range p.Views {
			agg := t.Maps[v.Map]
			if agg == nil || agg.Images == 0 || (agg.Counters == nil && v.Kind != programs.ViewHash && v.Kind != programs.ViewRecords) {
				s.Missing = append(s.Missing, v.Map)
				continue
			}
			switch v.Kind {
			case programs.ViewCounters:
				if s.Counters == nil {
					s.Counters = map[string]uint64{}
				}
				for i, f := range v.Fields {
					if i < len(agg.Counters) {
						s.Counters[f] = agg.Counters[i]
					}
				}
				for _, m := range v.Means {
					c := s.Counters[m.Count]
					sum := float64(s.Counters[m.Sum])
					if m.InFlight != "" {
						// stamps: an image's reading taken with blocks still
						// running (a process's last copy-out, if it died) has
						// no sum of durations; the mean is over the others
						var settled bool
						sum, c, settled = settledMean(agg.Parts, v.Fields, m)
						if !settled {
							s.InFlight = append(s.InFlight, m.Name)
						}
					}
					if c > 0 {
						if s.Means == nil {
							s.Means = map[string]float64{}
						}
						s.Means[m.Name] = sum / float64(c)
					}
				}
			case programs.ViewSMHistogram:
				sm := SMHistogram(agg.Counters)
				s.SMs = &sm
			case programs.ViewHash:
				if s.Hashes == nil {
					s.Hashes = map[string]HashSummary{}
				}
				s.Hashes[v.Map] = hashSummary(v, agg)
			case programs.ViewRecords:
				if s.Records == nil {
					s.Records = map[string]RecordsSummary{}
				}
				s.Records[v.Map] = recordsSummary(v, agg)
			case programs.ViewPerThread:
				if agg.Layout.Type != abi.MapPerThread {
					s.Missing = append(s.Missing, v.Map)
					continue
				}
				if s.PerThread == nil {
					s.PerThread = map[string]PerThreadSummary{}
				}
				s.PerThread[v.Map] = perThreadSummary(v, agg)
			case programs.ViewLog2Histogram:
				if s.Histograms == nil {
					s.Histograms = map[string]HistSummary{}
				}
				h := Log2Histogram(agg.Counters)
				h.Unit = v.Unit
				s.Histograms[v.Map] = h
			}
		}
		sort.Strings(s.Missing)
		out = append(out, s)
	}
	return out
}

// SMHistogram summarises counts indexed by SM id.
func SMHistogram(counts []uint64) SMSummary {
	s := SMSummary{MinSM: -1, MaxSM: -1}
	for sm, c := range counts {
		if c == 0 {
			continue
		}
		s.Used++
		s.Total = addSat(s.Total, c)
		if s.MinSM < 0 || c < s.Min {
			s.Min, s.MinSM = c, sm
		}
		if c > s.Max {
			s.Max, s.MaxSM = c, sm
		}
	}
	return s
}

// addSat is a+b, or MaxUint64 where that wraps: counts a tenant's file
// holds may be anything.
func addSat(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return s
}

// toUint64 converts a non-negative float, MaxUint64 from 2^64 on (Go leaves
// the conversion of a larger float undefined).
func toUint64(f float64) uint64 {
	if f >= 1<<64 {
		return math.MaxUint64
	}
	return uint64(f)
}

// log2Buckets is how many log2 buckets a u64 value can fall in: bit
// lengths 0..64. A histogram map with more entries (a file the tenant
// wrote) counts its higher buckets with the top one.
const log2Buckets = 65

// bucketRange is the value range of log2 bucket b: [lo, hi).
func bucketRange(b int) (lo, hi float64) {
	if b == 0 {
		return 0, 1
	}
	b = min(b, log2Buckets-1)
	return math.Ldexp(1, b-1), math.Ldexp(1, b)
}

// Log2Histogram summarises a histogram whose bucket b counts values of bit
// length b ([2^(b-1), 2^b); bucket 0 the value 0). Counts that add up past
// 2^64-1 saturate there.
func Log2Histogram(counts []uint64) HistSummary {
	var h HistSummary
	top := -1
	for b, c := range counts {
		h.Count = addSat(h.Count, c)
		if c > 0 {
			top = b
		}
	}
	if h.Count == 0 {
		return h
	}
	_, hi := bucketRange(top)
	h.Max = toUint64(hi)
	h.P50 = quantile(counts, h.Count, 0.50)
	h.P99 = quantile(counts, h.Count, 0.99)
	return h
}

func quantile(counts []uint64, total uint64, q float64) uint64 {
	// the 1-based rank of the value sought (float rounding may pass total)
	rank := min(max(toUint64(math.Ceil(q*float64(total))), 1), total)
	var cum uint64
	for b, c := range counts {
		if c == 0 {
			continue
		}
		next := addSat(cum, c)
		if next >= rank {
			if b == 0 {
				return 0
			}
			lo, hi := bucketRange(b)
			frac := float64(rank-cum) / float64(c)
			return toUint64(lo + (hi-lo)*frac)
		}
		cum = next
	}
	return 0
}

// BitLength is the log2 bucket of a value, as launch-latency computes it.
func BitLength(v uint64) int { return bits.Len64(v) }

// settledMean sums a stamps mean (Mean.InFlight) over the images whose
// reading had nothing in flight: the count equals the in-flight field and
// the sum, read as signed, is not negative. settled: every image was.
func settledMean(parts [][]uint64, fields []string, m programs.Mean) (sum float64, count uint64, settled bool) {
	is, ic, iv := slices.Index(fields, m.Sum), slices.Index(fields, m.Count), slices.Index(fields, m.InFlight)
	settled = true
	for _, p := range parts {
		if is < 0 || ic < 0 || iv < 0 || max(is, ic, iv) >= len(p) {
			continue
		}
		if p[iv] != p[ic] || int64(p[is]) < 0 {
			settled = false
			continue
		}
		sum += float64(int64(p[is]))
		count += p[ic]
	}
	return sum, count, settled
}

// hashSummary sums the entries of every image by key and decodes the top ones.
func hashSummary(v programs.View, agg *Aggregate) HashSummary {
	// the view's sizes, which its catalog checked against the object's
	// map; entries of another size (a module built from another version
	// of the probe, or a hostile file) are counted, never decoded
	ks, vs := programs.LayoutSize(v.Key), programs.LayoutSize(v.Value)
	if agg.Layout.Type != abi.MapHash {
		ks = -1
	}
	var h HashSummary
	byKey := map[string][]byte{}
	var keys []string
	for _, e := range agg.HashEntries {
		if len(e.Key) != ks || len(e.Value) != vs {
			h.BadSize++
			continue
		}
		k := string(e.Key)
		if old, ok := byKey[k]; ok {
			programs.AddNumeric(v.Value, old, e.Value)
			continue
		}
		byKey[k] = slices.Clone(e.Value)
		keys = append(keys, k)
	}
	h.Keys = len(keys)
	sums := programs.Summable(v.Value)
	var order string // the first unsigned value field: what "top" ranks by
	if len(sums) > 0 {
		order = sums[0]
		h.Sums = map[string]uint64{}
	}
	for _, k := range keys {
		for _, f := range sums {
			n, _ := programs.Numeric(v.Value, f, byKey[k])
			h.Sums[f] = addSat(h.Sums[f], n)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if order != "" {
			a, _ := programs.Numeric(v.Value, order, byKey[keys[i]])
			b, _ := programs.Numeric(v.Value, order, byKey[keys[j]])
			if a != b {
				return a > b
			}
		}
		return keys[i] < keys[j]
	})
	top := min(len(keys), v.TopOrDefault())
	h.Omitted = len(keys) - top
	h.Top = make([]HashEntry, 0, top)
	for _, k := range keys[:top] {
		h.Top = append(h.Top, HashEntry{Key: programs.DecodeFields(v.Key, []byte(k)), Value: programs.DecodeFields(v.Value, byKey[k])})
	}
	return h
}

// recordsSummary decodes the last records of a ring buffer.
func recordsSummary(v programs.View, agg *Aggregate) RecordsSummary {
	r := RecordsSummary{Count: uint64(agg.Records), Dropped: agg.Dropped, Last: []map[string]any{}}
	size := programs.LayoutSize(v.Record)
	var good [][]byte
	for _, rec := range agg.RecordData {
		if len(rec) != size {
			r.BadSize++
			continue
		}
		good = append(good, rec)
	}
	for _, rec := range good[max(0, len(good)-v.LastOrDefault()):] {
		r.Last = append(r.Last, programs.DecodeFields(v.Record, rec))
	}
	return r
}
