package main

import (
	"fmt"
	"slices"
	"strings"

	stdmaps "maps"

	"github.com/gpuext/gpuext/devrt/probefiles/maps"
	"github.com/gpuext/gpuext/gpubpf/programs"
)

// viewLines renders the hash, records and per-thread views of summaries
// as text lines, fields in the order the probe's view declares them:
//
//	PROBE: MAP: 3 keys (blocks=24 total)
//	  kernel=0x2f... bucket=10 -> blocks=12
//	PROBE: MAP: 5 records, 0 dropped, last 2:
//	  kernel=0x2f... block=3 ns=12000
//	PROBE: MAP: per-thread, 65536 rows, 0 accesses past the last row
//	  exits: rows used=400 sum=800 min=2 (row 0) max=2 (row 0) log2: [2,4)=400
func viewLines(cat *programs.Catalog, summaries []maps.ProbeSummary) []string {
	var out []string
	for _, s := range summaries {
		p, ok := cat.Get(s.Name)
		if !ok {
			continue
		}
		for _, v := range p.Views {
			switch v.Kind {
			case programs.ViewHash:
				h, ok := s.Hashes[v.Map]
				if !ok {
					continue
				}
				line := fmt.Sprintf("%s: %s: %d keys", s.Name, v.Map, h.Keys)
				if len(h.Sums) > 0 {
					var sums []string
					for _, f := range slices.Sorted(stdmaps.Keys(h.Sums)) {
						sums = append(sums, fmt.Sprintf("%s=%d", f, h.Sums[f]))
					}
					line += " (" + strings.Join(sums, " ") + " total)"
				}
				if h.BadSize > 0 {
					line += fmt.Sprintf(", %d entries of another size not shown", h.BadSize)
				}
				out = append(out, line)
				for _, e := range h.Top {
					out = append(out, "  "+fieldText(v.Key, e.Key)+" -> "+fieldText(v.Value, e.Value))
				}
				if h.Omitted > 0 {
					out = append(out, fmt.Sprintf("  ... %d more keys", h.Omitted))
				}
			case programs.ViewPerThread:
				pt, ok := s.PerThread[v.Map]
				if !ok {
					continue
				}
				out = append(out, perThreadLines(s.Name, v.Map, pt)...)
			case programs.ViewRecords:
				r, ok := s.Records[v.Map]
				if !ok {
					continue
				}
				line := fmt.Sprintf("%s: %s: %d records, %d dropped", s.Name, v.Map, r.Count, r.Dropped)
				if r.BadSize > 0 {
					line += fmt.Sprintf(", %d of another size not shown", r.BadSize)
				}
				if len(r.Last) > 0 {
					line += fmt.Sprintf(", last %d:", len(r.Last))
				}
				out = append(out, line)
				for _, rec := range r.Last {
					out = append(out, "  "+fieldText(v.Record, rec))
				}
			}
		}
	}
	return out
}

func fieldText(fields []programs.Field, vals map[string]any) string {
	parts := make([]string, 0, len(fields))
	for _, f := range fields {
		parts = append(parts, fmt.Sprintf("%s=%v", f.Name, vals[f.Name]))
	}
	return strings.Join(parts, " ")
}

// perThreadLines renders a per-thread view: per entry the rows used, their
// sum, the fewest and most of a row, and the log2 buckets of the rows.
func perThreadLines(probe, mapName string, pt maps.PerThreadSummary) []string {
	out := []string{fmt.Sprintf("%s: %s: per-thread, %d rows, %d accesses past the last row", probe, mapName, pt.Rows, pt.NoRow)}
	for _, e := range pt.Entries {
		line := fmt.Sprintf("  %s: rows used=%d sum=%d", e.Name, e.Used, e.Sum)
		if e.Used > 0 {
			line += fmt.Sprintf(" min=%d (row %d) max=%d (row %d) log2:", e.Min, e.MinRow, e.Max, e.MaxRow)
			for b, c := range e.Log2 {
				if c > 0 {
					line += " " + log2Bucket(b) + "=" + fmt.Sprint(c)
				}
			}
		}
		out = append(out, line)
	}
	return out
}

// log2Bucket names the values of bit length b: 1, [2,4), ..., [2^63,2^64).
func log2Bucket(b int) string {
	switch {
	case b <= 1:
		return fmt.Sprint(b)
	case b >= 64:
		return "[2^63,2^64)"
	}
	return fmt.Sprintf("[%d,%d)", uint64(1)<<(b-1), uint64(1)<<b)
}
