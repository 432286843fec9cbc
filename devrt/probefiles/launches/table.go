package launches

import (
	"math"
	"math/bits"
	"sort"
)

// MaxKernels bounds the distinct kernels a Table keeps while it adds files
// (a tenant's many processes); the rest go into their class's "other" row.
const MaxKernels = 4096

// Table is a tenant's launches: its processes' files summed.
type Table struct {
	Files int `json:"files"`
	// Latency: some process measured host-side latency.
	Latency bool `json:"latency"`
	// Launches per class (device, host, none), from the coverage.
	Launches map[Measured]uint64 `json:"launches"`
	Blocks   map[Measured]uint64 `json:"blocks"`
	// Coverage per class and reason, the most launches first.
	Coverage      []Coverage `json:"coverage"`
	GraphLaunches uint64     `json:"graphLaunches"`
	LatSkipped    uint64     `json:"latencySkipped"`
	// LatCalibNs: the largest calibration round trip of the processes.
	LatCalibNs uint64              `json:"latencyCalibrationNs"`
	LatHist    [HistBuckets]uint64 `json:"-"`
	// Kernels: the Top kernels with the most launches, then an "other"
	// row per class (Sorted).
	Kernels []Row `json:"kernels"`

	byKey map[rowKey]*Row
	other map[Measured]*Row
	cov   map[covKey]*Coverage
}

type rowKey struct {
	id   uint64
	name string
	m    Measured
}

type covKey struct {
	m      Measured
	reason string
}

// NewTable is an empty table.
func NewTable() *Table {
	return &Table{Launches: map[Measured]uint64{}, Blocks: map[Measured]uint64{}, byKey: map[rowKey]*Row{},
		other: map[Measured]*Row{}, cov: map[covKey]*Coverage{}}
}

// add is a saturating sum: counts from tenant files never wrap.
func add(a, b uint64) uint64 {
	s, c := bits.Add64(a, b, 0)
	if c != 0 {
		return math.MaxUint64
	}
	return s
}

// Add sums one process's file into the table.
func (t *Table) Add(f *File) {
	t.Files++
	t.Latency = t.Latency || f.Latency
	t.GraphLaunches = add(t.GraphLaunches, f.GraphLaunches)
	t.LatSkipped = add(t.LatSkipped, f.LatSkipped)
	t.LatCalibNs = max(t.LatCalibNs, f.LatCalibNs)
	for i, v := range f.LatHist {
		t.LatHist[i] = add(t.LatHist[i], v)
	}
	for _, c := range f.Coverage {
		t.Launches[c.Measured] = add(t.Launches[c.Measured], c.Launches)
		t.Blocks[c.Measured] = add(t.Blocks[c.Measured], c.Blocks)
		k := covKey{c.Measured, c.Reason}
		e, ok := t.cov[k]
		if !ok {
			e = &Coverage{Measured: c.Measured, Reason: c.Reason}
			t.cov[k] = e
		}
		e.Kernels = uint32(min(uint64(e.Kernels)+uint64(c.Kernels), math.MaxUint32))
		e.Launches = add(e.Launches, c.Launches)
		e.Blocks = add(e.Blocks, c.Blocks)
	}
	for _, r := range f.Rows {
		if r.Other() {
			t.addOther(r)
			continue
		}
		k := rowKey{r.KernelID, r.Name, r.Measured}
		e, ok := t.byKey[k]
		if !ok {
			if len(t.byKey) >= MaxKernels {
				t.addOther(r)
				continue
			}
			c := r
			t.byKey[k] = &c
			continue
		}
		merge(e, r)
		e.Image = -1 // image indexes are per process: a row of several names none
	}
}

func (t *Table) addOther(r Row) {
	o, ok := t.other[r.Measured]
	if !ok {
		o = &Row{Name: OtherName, NameLen: uint32(len(OtherName)), Measured: r.Measured, Reason: "(many)", Image: -1}
		t.other[r.Measured] = o
	}
	merge(o, r)
}

func merge(e *Row, r Row) {
	if e.Other() {
		e.Kernels = uint32(min(uint64(e.Kernels)+uint64(r.Kernels), math.MaxUint32))
	} else {
		e.Kernels = 1 // the same kernel in two processes is one kernel
	}
	e.Launches = add(e.Launches, r.Launches)
	e.GraphLaunches = add(e.GraphLaunches, r.GraphLaunches)
	e.Blocks = add(e.Blocks, r.Blocks)
	e.GridLast, e.BlockLast = r.GridLast, r.BlockLast
	e.MaxBlocks = max(e.MaxBlocks, r.MaxBlocks)
	e.MaxThreads = max(e.MaxThreads, r.MaxThreads)
	if r.LatCount > 0 {
		if e.LatCount == 0 || r.LatMinNs < e.LatMinNs {
			e.LatMinNs = r.LatMinNs
		}
		e.LatMaxNs = max(e.LatMaxNs, r.LatMaxNs)
		e.LatCount = add(e.LatCount, r.LatCount)
		e.LatSumNs = add(e.LatSumNs, r.LatSumNs)
	}
}

// Sort fills Kernels (the Top kernels by launches, then the "other" rows,
// the ones past the top included) and Coverage (by launches). Call it once
// the files are added.
func (t *Table) Sort() {
	rows := make([]*Row, 0, len(t.byKey))
	for _, r := range t.byKey {
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Launches != rows[j].Launches {
			return rows[i].Launches > rows[j].Launches
		}
		return rows[i].Name < rows[j].Name
	})
	other := map[Measured]Row{}
	for m, o := range t.other {
		other[m] = *o
	}
	t.Kernels = t.Kernels[:0]
	for i, r := range rows {
		if i < Top {
			t.Kernels = append(t.Kernels, *r)
			continue
		}
		o, ok := other[r.Measured]
		if !ok {
			o = Row{Name: OtherName, NameLen: uint32(len(OtherName)), Measured: r.Measured, Reason: "(many)", Image: -1}
		}
		merge(&o, *r)
		other[r.Measured] = o
	}
	for _, m := range Measures {
		if o, ok := other[m]; ok {
			t.Kernels = append(t.Kernels, o)
		}
	}
	t.Coverage = t.Coverage[:0]
	for _, c := range t.cov {
		t.Coverage = append(t.Coverage, *c)
	}
	sort.Slice(t.Coverage, func(i, j int) bool {
		a, b := t.Coverage[i], t.Coverage[j]
		if a.Launches != b.Launches {
			return a.Launches > b.Launches
		}
		return a.Measured < b.Measured || (a.Measured == b.Measured && a.Reason < b.Reason)
	})
}

// Total is every launch of the table, observed or not.
func (t *Table) Total() uint64 {
	var n uint64
	for _, v := range t.Launches {
		n = add(n, v)
	}
	return n
}
