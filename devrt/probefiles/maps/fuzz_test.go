package maps

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/devmap"
	"github.com/gpuext/gpuext/gpubpf/programs"
)

// seedMaps are maps of every device map type, filled with the device map
// operations (what the helpers leave on the GPU), and one the image lacks.
func seedMaps(t testing.TB) []Map {
	t.Helper()
	lay := func(typ abi.MapType, k, v, n uint32) abi.MapLayout {
		l, err := abi.Layout(typ, k, v, n)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	arr := devmap.NewImage(lay(abi.MapArray, 4, 8, 4))
	arr.Update(u32(1), u64(40), devmap.FlagAny, 0)
	big := devmap.NewImage(lay(abi.MapArray, 4, 24, 2)) // values over 8 bytes carry a seq word
	big.Update(u32(0), []byte("twenty-four bytes long!!"), devmap.FlagAny, 0)
	h := devmap.NewImage(lay(abi.MapHash, 8, 8, 4))
	for k := uint64(1); k <= 3; k++ {
		h.Update(u64(k), u64(k*k), devmap.FlagAny, 0)
	}
	h.Delete(u64(2))
	rb := devmap.NewImage(lay(abi.MapRingbuf, 0, 0, 40))
	rb.RingbufOutput([]byte("launch-1"), 0)
	rb.RingbufOutput([]byte("a longer record"), 0)
	rb.RingbufOutput([]byte("dropped"), 0)
	return []Map{mapOf("arr", arr), mapOf("big", big), mapOf("h", h), mapOf("rb", rb), {Name: "absent"}}
}

// catalogMaps are the catalog probes' maps (launch-count, launch-stats,
// sm-histogram, launch-latency) in their real layouts, with counts of a
// few launches; the per-warp ones (512 KiB each) absent, as in an image
// where the translator put them in another module.
func catalogMaps(t testing.TB) []Map {
	t.Helper()
	arr := func(name string, n uint32, vals map[uint32]uint64) Map {
		l, err := abi.Layout(abi.MapArray, 4, 8, n)
		if err != nil {
			t.Fatal(err)
		}
		im := devmap.NewImage(l)
		for i, v := range vals {
			im.Update(u32(i), u64(v), devmap.FlagAny, 0)
		}
		return mapOf(name, im)
	}
	return []Map{
		arr("lat_hist", 64, map[uint32]uint64{11: 2, 12: 1, 20: 1}),
		arr("lat_misc", 2, map[uint32]uint64{1: 1}),
		{Name: "lc_counters"},
		{Name: "ls_counters"},
		arr("smh_counts", 256, map[uint32]uint64{0: 6, 1: 6, 2: 3, 3: 3}),
	}
}

// fuzzSeeds are FuzzDecode's committed seed corpus: real encodings, and
// the hostile files (the crashers of the decoder before its bounds checks).
func fuzzSeeds(t testing.TB) map[string][]byte {
	seeds := map[string][]byte{
		"seed-catalog":    Encode(&File{PID: 4242, Image: 1, Seq: 3, TimeNs: 1.7e18, Tenant: 9, Final: true, Maps: catalogMaps(t)}),
		"seed-every-type": Encode(&File{PID: 7, Image: 0, Seq: 1, Tenant: 2, Maps: seedMaps(t)}),
		"seed-no-maps":    Encode(&File{PID: 1}),
	}
	for name, b := range hostileFiles() {
		seeds[name] = b
	}
	return seeds
}

const fuzzDecodeDir = "testdata/fuzz/FuzzDecode"

func fuzzFile(b []byte) []byte { return fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", b) }

// The committed corpus holds every seed as the encoders write it today
// (GPUEXT_WRITE_FUZZ_SEEDS=1 rewrites them).
func TestFuzzDecodeSeedsCommitted(t *testing.T) {
	for name, b := range fuzzSeeds(t) {
		p := filepath.Join(fuzzDecodeDir, name)
		if os.Getenv("GPUEXT_WRITE_FUZZ_SEEDS") == "1" {
			if err := os.MkdirAll(fuzzDecodeDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, fuzzFile(b), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, fuzzFile(b)) {
			t.Errorf("%s: not the seed the encoders write (%v): run GPUEXT_WRITE_FUZZ_SEEDS=1 go test -run %s", p, err, t.Name())
		}
	}
}

// FuzzDecode: on any bytes, Decode returns (no panic, no endless loop) an
// ErrFormat error or a file that encodes back to itself; every map of an
// accepted file decodes to its entries, and the tenant summary over it
// (what gpuextctl probes prints) is consistent.
func FuzzDecode(f *testing.F) {
	// A per-warp map is 128 KiB at least: added here, not committed.
	l, err := abi.Layout(abi.MapPerWarp, 4, 8, 1)
	if err != nil {
		f.Fatal(err)
	}
	pw := devmap.NewImage(l)
	pw.Update(u32(0), u64(5), devmap.FlagAny, devmap.Slot(3, 1))
	f.Add(Encode(&File{PID: 3, Maps: []Map{mapOf("ls_counters", pw)}}))
	cat := programs.Builtin()
	names := cat.Names()
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error does not wrap ErrFormat: %v", err)
			}
			return
		}
		again, err := Decode(Encode(file))
		if err != nil || !reflect.DeepEqual(again, file) {
			t.Fatalf("re-encoded file decodes to %+v, %v; want %+v", again, err, file)
		}
		for _, m := range file.Maps {
			ents, err := m.Entries()
			if !m.Present || m.Layout.Type == abi.MapRingbuf {
				continue // a ringbuf's records may overrun its log: an error, not a panic
			}
			if err != nil {
				t.Fatalf("map %q: %v", m.Name, err)
			}
			if n := uint32(len(ents)); (m.Layout.Type == abi.MapHash && n > m.Layout.NBuckets) ||
				(m.Layout.Type != abi.MapHash && n != m.Layout.MaxEntries) {
				t.Fatalf("map %q (%+v): %d entries", m.Name, m.Layout, n)
			}
		}
		ten := &Tenant{Maps: map[string]*Aggregate{}}
		ten.add("a.maps", file, nil, false)
		ten.add("b.maps", file, nil, false)
		for _, s := range Summarize(ten, cat, names) {
			for name, h := range s.Histograms {
				if h.Count > 0 && (h.P50 > h.P99 || h.P99 > h.Max) {
					t.Fatalf("%s %s: %+v, want p50 <= p99 <= max", s.Name, name, h)
				}
			}
			if sm := s.SMs; sm != nil && sm.Used > 0 && (sm.Min > sm.Max || sm.Max > sm.Total) {
				t.Fatalf("%s: %+v", s.Name, sm)
			}
			if !sort.StringsAreSorted(s.Missing) {
				t.Fatalf("%s: missing %v", s.Name, s.Missing)
			}
		}
	})
}
