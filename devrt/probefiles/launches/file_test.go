package launches

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sample is a process's file as the interposer writes it: device, host and
// none coverage, a cut name, an "other" row.
func sample() *File {
	f := &File{PID: 4242, Seq: 3, TimeNs: 1e18, Tenant: 7, Final: true, Latency: true, Kernels: 70,
		GraphLaunches: 10, LatSkipped: 2, LatCalibNs: 9000,
		Coverage: []Coverage{
			{Measured: Device, Reason: "ok", Kernels: 1, Launches: 4, Blocks: 32},
			{Measured: Host, Reason: "sass-only", Kernels: 68, Launches: 500, Blocks: 4000},
			{Measured: None, Reason: "graph-not-instantiated-seen", Launches: 3},
		},
		Rows: []Row{
			{KernelID: 11, Name: "fake_i0_k1", NameLen: 10, Measured: Device, Reason: "ok", Image: 0, Kernels: 1,
				Launches: 4, Blocks: 32, GridLast: [3]uint32{4, 2, 1}, BlockLast: [3]uint32{128, 1, 1}, MaxBlocks: 8, MaxThreads: 128},
			{KernelID: 12, Name: strings.Repeat("E", NameSize-1), NameLen: 1456, Truncated: true, Measured: Host,
				Reason: "sass-only", Image: 1, Kernels: 1, Launches: 300, GraphLaunches: 40, Blocks: 2400,
				LatCount: 250, LatSumNs: 2500000, LatMinNs: 9000, LatMaxNs: 20000},
			{Name: OtherName, NameLen: uint32(len(OtherName)), Measured: Host, Reason: "(many)", Image: -1, Kernels: 67, Launches: 200, Blocks: 1600},
		}}
	f.LatHist[13] = 200
	f.LatHist[14] = 50
	return f
}

func TestDecodeRoundTrip(t *testing.T) {
	f := sample()
	got, err := Decode(Encode(f))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, f) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, f)
	}
	if !got.Rows[2].Other() || got.Rows[0].Other() {
		t.Errorf("Other(): %v %v", got.Rows[2].Other(), got.Rows[0].Other())
	}
}

// Every prefix of a file, and every file with a count, size or string the
// interposer never writes, is an error naming what is wrong; nothing panics.
func TestDecodeRefusesHostileFiles(t *testing.T) {
	good := Encode(sample())
	for n := 0; n < len(good); n++ {
		if _, err := Decode(good[:n]); !errors.Is(err, ErrFormat) {
			t.Fatalf("a %d-byte prefix decoded: %v", n, err)
		}
	}
	le := binary.LittleEndian
	row0 := HeaderSize + 3*CoverageSize
	for _, c := range []struct {
		name string
		edit func(b []byte) []byte
		want string
	}{
		{"huge rows", func(b []byte) []byte { le.PutUint32(b[hdrOffNRows:], math.MaxUint32); return b }, "rows"},
		{"huge coverage", func(b []byte) []byte { le.PutUint32(b[hdrOffNCoverage:], 1<<20); return b }, "coverage"},
		{"one row more than there is", func(b []byte) []byte { le.PutUint32(b[hdrOffNRows:], 4); return b }, "make"},
		{"trailing bytes", func(b []byte) []byte { return append(b, 0) }, "make"},
		{"version", func(b []byte) []byte { le.PutUint32(b[hdrOffVersion:], 2); return b }, "version 2"},
		{"final", func(b []byte) []byte { le.PutUint32(b[hdrOffFinal:], 7); return b }, "final"},
		{"flags", func(b []byte) []byte { le.PutUint32(b[hdrOffFlags:], 0x80); return b }, "flags"},
		{"measured", func(b []byte) []byte { le.PutUint32(b[row0+rowOffMeasured:], 9); return b }, "measured is 9"},
		{"name not terminated", func(b []byte) []byte {
			copy(b[row0+rowOffName:row0+rowOffName+NameSize], strings.Repeat("x", NameSize))
			return b
		}, "NUL"},
		{"name not printable", func(b []byte) []byte { b[row0+rowOffName] = '\n'; return b }, "printable"},
		{"bytes after the NUL", func(b []byte) []byte { b[row0+rowOffName+NameSize-2] = 'x'; return b }, "after its NUL"},
		{"reason empty", func(b []byte) []byte { b[HeaderSize+covOffReason] = 0; return b }, "empty"},
		{"name length below the prefix", func(b []byte) []byte { le.PutUint32(b[row0+rowOffNameLen:], 2); return b }, "length 2"},
		{"name length huge", func(b []byte) []byte { le.PutUint32(b[row0+rowOffNameLen:], math.MaxUint32); return b }, "length"},
		{"cut, yet the prefix is short", func(b []byte) []byte { le.PutUint32(b[row0+rowOffNameLen:], 500); return b }, "not full"},
		{"no kernels", func(b []byte) []byte { le.PutUint32(b[row0+rowOffKernels:], 0); return b }, "no kernels"},
		{"more graph launches than launches", func(b []byte) []byte {
			le.PutUint64(b[row0+rowOffGraphLaunches:], math.MaxUint64)
			return b
		}, "in graphs"},
		{"coverage twice", func(b []byte) []byte {
			copy(b[HeaderSize+CoverageSize:HeaderSize+2*CoverageSize], b[HeaderSize:HeaderSize+CoverageSize])
			return b
		}, "twice"},
	} {
		b := c.edit(append([]byte(nil), good...))
		_, err := Decode(b)
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
	if _, err := Decode(make([]byte, MaxFileSize+1)); !errors.Is(err, ErrFormat) {
		t.Errorf("an oversized file: %v", err)
	}
}

// Root reads the tenant's file: a link is not followed, a FIFO is not
// waited on, a huge sparse file is refused before it is read.
func TestReadFileRefusesLinksFIFOsAndHugeFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "1.launches")
	if err := os.WriteFile(good, Encode(sample()), 0o644); err != nil {
		t.Fatal(err)
	}
	if f, err := ReadFile(good); err != nil || f.PID != 4242 {
		t.Fatalf("good file: %v %v", f, err)
	}
	secret := filepath.Join(dir, "host-secret")
	if err := os.WriteFile(secret, Encode(sample()), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "2.launches")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(link); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("a link was followed: %v", err)
	}
	fifo := filepath.Join(dir, "3.launches")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := ReadFile(fifo); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("a FIFO: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadFile waits on a FIFO")
	}
	huge := filepath.Join(dir, "4.launches")
	if err := os.WriteFile(huge, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 8<<30); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(huge); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "more than") {
		t.Errorf("an 8 GiB sparse file: %v", err)
	}
}

// A tenant's processes summed: classes, reasons, kernels by name and class;
// counts a tenant made huge saturate instead of wrapping; past MaxKernels
// distinct kernels the rest go to their class's "other" row.
func TestTableMerges(t *testing.T) {
	tab := NewTable()
	a, b := sample(), sample()
	b.PID = 4243
	b.Rows[0].Launches = math.MaxUint64
	b.Coverage[1].Launches = math.MaxUint64
	tab.Add(a)
	tab.Add(b)
	tab.Sort()
	if tab.Files != 2 || tab.Launches[Device] != 8 || tab.Launches[Host] != math.MaxUint64 || tab.Launches[None] != 6 {
		t.Errorf("launches %v", tab.Launches)
	}
	if tab.Total() != math.MaxUint64 {
		t.Errorf("total %d, want saturated", tab.Total())
	}
	if len(tab.Kernels) != 3 || tab.Kernels[0].Name != "fake_i0_k1" || tab.Kernels[0].Launches != math.MaxUint64 ||
		tab.Kernels[0].Kernels != 1 || tab.Kernels[0].Image != -1 {
		t.Errorf("kernels %+v", tab.Kernels)
	}
	if o := tab.Kernels[2]; !o.Other() || o.Kernels != 134 || o.Launches != 400 {
		t.Errorf("other row %+v", o)
	}
	if tab.LatHist[13] != 400 || tab.GraphLaunches != 20 || tab.LatCalibNs != 9000 {
		t.Errorf("hist %d, graph launches %d, calib %d", tab.LatHist[13], tab.GraphLaunches, tab.LatCalibNs)
	}

	many := NewTable()
	for i := 0; i < MaxKernels+10; i++ {
		many.Add(&File{Rows: []Row{{KernelID: uint64(i + 1), Name: "k", NameLen: 1, Measured: Host, Reason: "sass-only", Kernels: 1, Launches: 1}}})
	}
	many.Sort()
	if len(many.Kernels) != Top+1 {
		t.Fatalf("%d rows, want the top %d and an other row", len(many.Kernels), Top)
	}
	if o := many.Kernels[Top]; !o.Other() || o.Kernels != MaxKernels+10-Top || o.Launches != MaxKernels+10-Top {
		t.Errorf("other row %+v", o)
	}
}
