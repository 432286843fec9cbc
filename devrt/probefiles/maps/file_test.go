package maps

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/devmap"
)

// rawMap is one map entry of a hand-made .maps file: the size its header
// announces and the bytes that follow (a descriptor and data, or less).
type rawMap struct {
	name string
	size uint64
	body []byte
}

// rawFile writes a .maps file byte by byte, as a tenant could: nothing in
// it need be consistent.
func rawFile(nmaps uint32, ms ...rawMap) []byte {
	le := binary.LittleEndian
	b := make([]byte, HeaderSize)
	copy(b, Magic)
	le.PutUint32(b[hdrOffVersion:], Version)
	le.PutUint32(b[hdrOffNMaps:], nmaps)
	for _, m := range ms {
		h := make([]byte, entrySize)
		copy(h[entryOffName:], m.name)
		le.PutUint64(h[entryOffBytes:], m.size)
		b = append(b, h...)
		b = append(b, m.body...)
	}
	return b
}

// rawDescriptor is a struct gpuext_dmap with the given fields.
func rawDescriptor(typ abi.MapType, key, value, maxEntries, nbuckets, stride uint32, data uint64) []byte {
	le := binary.LittleEndian
	d := make([]byte, abi.MapHdrSize)
	for i, v := range []uint32{uint32(typ), key, value, maxEntries, nbuckets, stride} {
		le.PutUint32(d[4*i:], v)
	}
	le.PutUint64(d[24:], data)
	return d
}

// hostileFiles are .maps files a tenant can write to make the reader (root)
// panic, loop or allocate, or decode to nonsense: each must be refused as
// ErrFormat. "crash-" ones made the decoder before its bounds checks panic
// or loop (in Decode, or in Entries on what it accepted); "bad-" ones it
// accepted or refused by luck. All are in FuzzDecode's committed corpus.
func hostileFiles() map[string][]byte {
	desc := rawDescriptor
	return map[string][]byte{
		// (size + 7) &^ 7 wrapped to 0: the size passed the check against
		// what the file has left and slicing panicked.
		"crash-size-0xffffffffffffffff": rawFile(1, rawMap{"m", math.MaxUint64, make([]byte, 64)}),
		"bad-size-0xfffffffffffffff8":   rawFile(1, rawMap{"m", math.MaxUint64 - 7, make([]byte, 64)}),
		// abi.Layout's bucket loop: n < 2*0xFFFFFFFF never ended (n wrapped to 0).
		"crash-hash-max-entries-0xffffffff": rawFile(1, rawMap{"h", abi.MapHdrSize,
			desc(abi.MapHash, 8, 8, math.MaxUint32, 0, 0, 0)}),
		// 2*0x80000000 wraps to 0: one bucket for 2^31 entries.
		"bad-hash-max-entries-0x80000000": rawFile(1, rawMap{"h", abi.MapHdrSize + 32,
			append(desc(abi.MapHash, 8, 8, 1<<31, 1, 24, 32), make([]byte, 32)...)}),
		// round8(0xFFFFFFFF) wrapped to 0: an array of 8-byte rows holding
		// 4 GiB values; Entries sliced past the data.
		"crash-array-value-size-0xffffffff": rawFile(1, rawMap{"a", abi.MapHdrSize + 8,
			append(desc(abi.MapArray, 4, math.MaxUint32, 1, 1, 8, 8), make([]byte, 8)...)}),
		// a per-warp map of 0-byte values has no data: Entries walked
		// 2^32 entries times 16384 slots.
		"crash-perwarp-value-size-0": rawFile(1, rawMap{"pw", abi.MapHdrSize,
			desc(abi.MapPerWarp, 4, 0, math.MaxUint32, abi.MapWarpSlots, 0, 0)}),
		// 2^32-1 maps announced in a 48-byte file.
		"bad-nmaps-0xffffffff": rawFile(math.MaxUint32),
		"bad-nmaps-65":         rawFile(MaxMaps + 1),
		// a size that ends exactly at the end of the file, its padding missing
		"bad-padding-missing": rawFile(1, rawMap{"r", abi.MapHdrSize + 17,
			append(desc(abi.MapRingbuf, 0, 0, 1, 1, 1, 17), make([]byte, 17)...)}),
		"bad-descriptor-data-0xffffffffffffffff": rawFile(1, rawMap{"r", abi.MapHdrSize + 24,
			append(desc(abi.MapRingbuf, 0, 0, 8, 8, 1, math.MaxUint64), make([]byte, 24)...)}),
		"bad-name-not-terminated": rawFile(1, rawMap{strings.Repeat("n", NameSize), 0, nil}),
		"bad-name-control-bytes":  rawFile(1, rawMap{"ls\ncounters", 0, nil}),
		"bad-name-twice":          rawFile(2, rawMap{"m", 0, nil}, rawMap{"m", 0, nil}),
	}
}

// Every hostile file is refused, promptly: a decoder that panics fails the
// test, one that loops is reported after a minute instead of hanging.
func TestDecodeHostileFiles(t *testing.T) {
	for name, b := range hostileFiles() {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				f, err := Decode(b)
				if err == nil {
					for _, m := range f.Maps { // what ReadTenant and the summary walk
						if _, err := m.Entries(); err != nil {
							break
						}
					}
				}
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, ErrFormat) {
					t.Fatalf("Decode: %v, want ErrFormat", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("Decode (or Entries on what it accepted) did not return")
			}
		})
	}
}

// What probe_copyout.c writes for a map it could not bind (size 0) and for ones of
// every device map type decodes, field by field.
func TestDecodeEveryMapType(t *testing.T) {
	f := &File{PID: 7, Image: 2, Seq: 3, TimeNs: 4, Tenant: 5, Maps: seedMaps(t)}
	got, err := Decode(Encode(f))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Maps) != len(f.Maps) {
		t.Fatalf("%d maps, want %d", len(got.Maps), len(f.Maps))
	}
	for i, m := range got.Maps {
		w := f.Maps[i]
		if m.Name != w.Name || m.Present != w.Present || m.Layout != w.Layout || string(m.Bytes) != string(w.Bytes) {
			t.Errorf("map %d: %s %v %+v, want %s %v %+v", i, m.Name, m.Present, m.Layout, w.Name, w.Present, w.Layout)
		}
	}
}

func TestDecodeFinalIsZeroOrOne(t *testing.T) {
	b := Encode(&File{PID: 1})
	binary.LittleEndian.PutUint32(b[hdrOffFinal:], 2)
	if _, err := Decode(b); !errors.Is(err, ErrFormat) {
		t.Fatalf("final=2: %v, want ErrFormat", err)
	}
}

func TestLayoutBoundsSizes(t *testing.T) {
	for _, tc := range []struct {
		typ           abi.MapType
		key, val, max uint32
	}{
		{abi.MapHash, 8, 8, math.MaxUint32},
		{abi.MapHash, 8, 8, 1 << 31},
		{abi.MapHash, 0, 8, 4},
		{abi.MapArray, 4, math.MaxUint32, 1},
		{abi.MapArray, 4, math.MaxUint32 - 6, 1},
		{abi.MapArray, 4, 0, 4},
		{abi.MapPerWarp, 4, 0, math.MaxUint32},
		{abi.MapPerWarp, 4, 1 << 30, 1 << 30},
		{abi.MapPerWarp, 4, 8, math.MaxUint32},
		{abi.MapRingbuf, 0, 0, math.MaxUint32},
		{abi.MapType(9), 4, 8, 1},
	} {
		done := make(chan error, 1)
		go func() {
			_, err := abi.Layout(tc.typ, tc.key, tc.val, tc.max)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("Layout(%s, %d, %d, %d): no error", tc.typ, tc.key, tc.val, tc.max)
			}
		case <-time.After(time.Minute):
			t.Fatalf("Layout(%s, %d, %d, %d) did not return", tc.typ, tc.key, tc.val, tc.max)
		}
	}
	// the largest maps that fit stay
	for _, tc := range []struct {
		typ           abi.MapType
		key, val, max uint32
	}{
		{abi.MapArray, 4, 8, 1 << 26},
		{abi.MapPerWarp, 4, 8, 8192},
		{abi.MapRingbuf, 0, 0, 1<<30 - 16 - abi.MapStripesSize}, // with its drop stripes
		{abi.MapHash, 8, 8, 1 << 24},
	} {
		if l, err := abi.Layout(tc.typ, tc.key, tc.val, tc.max); err != nil || l.DataSize > abi.MaxMapData {
			t.Errorf("Layout(%s, %d, %d, %d) = %+v, %v", tc.typ, tc.key, tc.val, tc.max, l, err)
		}
	}
}

// Counts a tenant wrote may add up past 2^64 and fill bucket 64 (values of
// 2^63 and up): the summary saturates instead of wrapping (a count of 0
// hid every launch) or converting 2^64 to an undefined integer.
func TestLog2HistogramSaturates(t *testing.T) {
	counts := make([]uint64, 65)
	counts[3] = 1 << 63
	counts[64] = 1 << 63
	h := Log2Histogram(counts)
	if h.Count != math.MaxUint64 || h.Max != math.MaxUint64 || h.P50 > h.P99 || h.P99 > h.Max || h.P50 < 4 {
		t.Errorf("%+v: want the count and max saturated, 4 <= p50 <= p99 <= max", h)
	}
	long := make([]uint64, 200) // a histogram map with more buckets than bit lengths
	long[199] = 1
	if h := Log2Histogram(long); h.Max != math.MaxUint64 || h.P99 > h.Max || h.Count != 1 {
		t.Errorf("bucket 199: %+v", h)
	}
	sm := SMHistogram([]uint64{math.MaxUint64, 2})
	if sm.Total != math.MaxUint64 || sm.Used != 2 {
		t.Errorf("sm histogram %+v", sm)
	}
}

// ReadFile refuses what a tenant can put in its probes directory to make
// root's reader block or read without end: a FIFO, a link to /dev/zero, a
// sparse file of more than MaxFileSize.
func TestReadFileRefusesWhatIsNoMapsFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "1-0.maps")
	writeFile(t, dir, "1-0.maps", Encode(&File{PID: 1, Maps: seedMaps(t)}))
	if f, err := ReadFile(good); err != nil || f.PID != 1 {
		t.Fatalf("good file: %+v, %v", f, err)
	}
	fifo := filepath.Join(dir, "2-0.maps")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "3-0.maps")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "4-0.maps")
	writeFile(t, dir, "4-0.maps", Encode(&File{PID: 4}))
	if err := os.Truncate(big, MaxFileSize+1); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, zero, big, filepath.Join(dir, "none.maps")} {
		done := make(chan error, 1)
		go func() { _, err := ReadFile(p); done <- err }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s: no error", filepath.Base(p))
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s: ReadFile did not return", filepath.Base(p))
		}
	}
}

// A per-thread map's descriptor decodes with its own row count, and its
// counters are the rows' sums; a row count past the bound is a format error.
func TestPerThreadMapDecodes(t *testing.T) {
	l, err := abi.PerThreadLayout(4, 8, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	im := devmap.NewImage(l)
	le := binary.LittleEndian
	for row := uint64(0); row < 3; row++ {
		le.PutUint64(im.Bytes[abi.MapHdrSize+8*(2*row):], row+1) // entry 0
		le.PutUint64(im.Bytes[abi.MapHdrSize+8*(2*row+1):], 10)  // entry 1
	}
	got, err := descriptor(im.Bytes)
	if err != nil || got != l {
		t.Fatalf("descriptor = %+v, %v; want %+v", got, err, l)
	}
	m := Map{Name: "pt", Present: true, Layout: l, Bytes: im.Bytes}
	c, err := m.Counters()
	if err != nil || fmt.Sprint(c) != "[6 30]" {
		t.Fatalf("counters %v, %v; want [6 30] (rows summed)", c, err)
	}
	bad := bytes.Clone(im.Bytes)
	le.PutUint32(bad[16:], abi.MapMaxThreadSlots+1)
	if _, err := descriptor(bad); !errors.Is(err, ErrFormat) {
		t.Errorf("a row count past %d: %v, want ErrFormat", abi.MapMaxThreadSlots, err)
	}
}
