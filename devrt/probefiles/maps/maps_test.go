package maps

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/devmap"
	"github.com/gpuext/gpuext/gpubpf/programs"
)

func u32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func layout(t *testing.T, typ abi.MapType, k, v, n uint32) abi.MapLayout {
	t.Helper()
	l, err := abi.Layout(typ, k, v, n)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// counterImage is an array of u64 counters holding vals, built with the
// device map operations (what the helpers leave on the GPU).
func counterImage(t *testing.T, n uint32, vals map[uint32]uint64) *devmap.Image {
	im := devmap.NewImage(layout(t, abi.MapArray, 4, 8, n))
	for i, v := range vals {
		if rc := im.Update(u32(i), u64(v), devmap.FlagAny, 0); rc != 0 {
			t.Fatalf("update %d: %d", i, rc)
		}
	}
	return im
}

func mapOf(name string, im *devmap.Image) Map {
	return Map{Name: name, Present: true, Layout: im.Layout, Bytes: im.Bytes}
}

func TestDecodeRoundTrip(t *testing.T) {
	f := &File{PID: 4242, Image: 3, Seq: 7, TimeNs: 1e18, Tenant: 9, Final: true,
		Maps: []Map{mapOf("ls_counters", counterImage(t, 4, map[uint32]uint64{0: 5, 1: 40})), {Name: "absent"}}}
	got, err := Decode(Encode(f))
	if err != nil {
		t.Fatal(err)
	}
	if got.PID != 4242 || got.Image != 3 || got.Seq != 7 || got.Tenant != 9 || !got.Final || len(got.Maps) != 2 {
		t.Fatalf("decoded %+v", got)
	}
	c, err := got.Maps[0].Counters()
	if err != nil || len(c) != 4 || c[0] != 5 || c[1] != 40 {
		t.Fatalf("counters %v %v", c, err)
	}
	if got.Maps[1].Present || got.Maps[1].Name != "absent" {
		t.Errorf("absent map decoded as %+v", got.Maps[1])
	}
}

func TestDecodeRejects(t *testing.T) {
	good := Encode(&File{PID: 1, Maps: []Map{mapOf("m", counterImage(t, 4, nil))}})
	corrupt := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for name, tc := range map[string]struct {
		b    []byte
		want string
	}{
		"magic":     {corrupt(func(b []byte) []byte { b[0] = 'X'; return b }), "GXPMAPS"},
		"version":   {corrupt(func(b []byte) []byte { b[8] = 2; return b }), "version 2"},
		"truncated": {good[:len(good)-8], `map "m"`},
		"trailing":  {append(append([]byte(nil), good...), 0), "after the last map"},
		"descriptor": {corrupt(func(b []byte) []byte {
			b[HeaderSize+NameSize+8+20] = 99 // stride
			return b
		}), `map "m"`},
	} {
		_, err := Decode(tc.b)
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want ErrFormat naming %q", name, err, tc.want)
		}
	}
}

func TestMapTypes(t *testing.T) {
	// per-warp: three warps in different slots add to entry 1; the host sums them.
	pw := devmap.NewImage(layout(t, abi.MapPerWarp, 4, 8, 2))
	for i, slot := range []uint32{devmap.Slot(0, 0), devmap.Slot(5, 3), devmap.Slot(255, 63)} {
		pw.Update(u32(1), u64(uint64(10*(i+1))), devmap.FlagAny, slot)
	}
	c, err := mapOf("pw", pw).Counters()
	if err != nil || c[0] != 0 || c[1] != 60 {
		t.Errorf("per-warp sum %v %v, want [0 60]", c, err)
	}
	// hash: live keys only.
	h := devmap.NewImage(layout(t, abi.MapHash, 8, 8, 16))
	for k := uint64(1); k <= 5; k++ {
		h.Update(u64(k), u64(k*k), devmap.FlagAny, 0)
	}
	h.Delete(u64(3))
	ents, err := mapOf("h", h).Entries()
	if err != nil || len(ents) != 4 {
		t.Fatalf("hash entries %d %v, want 4", len(ents), err)
	}
	if _, err := mapOf("h", h).Counters(); err == nil {
		t.Error("a hash is not counters")
	}
	// ringbuf: 64 bytes hold two 16-byte records and one 24-byte one; the next drops.
	rb := devmap.NewImage(layout(t, abi.MapRingbuf, 0, 0, 64))
	for _, rec := range []string{"launch-1", "launch-2", "a longer one"} {
		if rc := rb.RingbufOutput([]byte(rec), 0); rc != 0 {
			t.Fatalf("output %q: %d", rec, rc)
		}
	}
	if rc := rb.RingbufOutput([]byte("x"), 0); rc != -devmap.EAGAIN {
		t.Fatalf("full ringbuf: %d", rc)
	}
	recs, dropped, err := mapOf("rb", rb).Ringbuf()
	if err != nil || len(recs) != 3 || string(recs[2]) != "a longer one" || dropped != 1 {
		t.Errorf("ringbuf %q dropped %d err %v", recs, dropped, err)
	}
}

func TestParseStatus(t *testing.T) {
	text := "image=0 state=unpatched reason=sass-only kernels=0 jit_ms=0 api=cuModuleLoadData kind=cubin\n" +
		"image=1 state=patched reason=ok kernels=2/2 jit_ms=3.1 api=cuLibraryLoadData kind=fatbin ptx_arch=80 target=sm_80\n" +
		"image=1 state=patched reason=no-copy-stream\n" +
		"garbage line\n" +
		"image=- state=off reason=module.ptx-unreadable\n" +
		"image=- launch_time=off reason=stream-write-failed:1\n" +
		"image=1 ctx=1 state=bound context=0x55\n" +
		"image=1 ctx=1 state=unbound reason=context-destroyed copies=1\n" +
		"image=1 ctx=0 state=unbound reason=unloaded final=missed copies=0\n"
	imgs, off := ParseStatus(77, text)
	if len(imgs) != 2 || imgs[0].State != "unpatched" || imgs[0].Reason != "sass-only" || imgs[1].Reason != "no-copy-stream" {
		t.Fatalf("images %+v", imgs)
	}
	if imgs[0].MissedFinal || !imgs[1].MissedFinal {
		t.Errorf("missed last copy: image 0 %v (want false), image 1 %v (want true)", imgs[0].MissedFinal, imgs[1].MissedFinal)
	}
	if imgs[0].Fields["kind"] != "cubin" || imgs[0].PID != 77 {
		t.Errorf("fields %+v", imgs[0])
	}
	if len(off) != 2 || off[0] != "module.ptx-unreadable" || off[1] != "launch_time=off:stream-write-failed:1" {
		t.Errorf("off %v", off)
	}
}

func writeFile(t *testing.T, dir, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A tenant with two processes (one with two patched images) and a stale
// file from an older probe set: counts add up over the current module only.
func TestReadTenantAndSummarize(t *testing.T) {
	dir := t.TempDir()
	ls := func(launches, blocks, ns, exits uint64) Map {
		return mapOf("ls_counters", counterImage(t, 4, map[uint32]uint64{0: launches, 1: blocks, 2: ns, 3: exits}))
	}
	sm := func(counts map[uint32]uint64) Map { return mapOf("smh_counts", counterImage(t, 256, counts)) }
	hist := func(counts map[uint32]uint64) Map { return mapOf("lat_hist", counterImage(t, 64, counts)) }
	writeFile(t, dir, "100-0.maps", Encode(&File{PID: 100, Image: 0, Maps: []Map{
		ls(2, 8, 8000, 8), sm(map[uint32]uint64{0: 4, 1: 4}), hist(map[uint32]uint64{10: 1, 11: 1})}}))
	writeFile(t, dir, "100-1.maps", Encode(&File{PID: 100, Image: 1, Maps: []Map{
		ls(1, 4, 2000, 4), sm(map[uint32]uint64{1: 1, 7: 3}), hist(map[uint32]uint64{11: 1})}}))
	writeFile(t, dir, "200-0.maps", Encode(&File{PID: 200, Image: 0, Final: true, Maps: []Map{
		ls(1, 1, 600, 1), {Name: "smh_counts"}, hist(map[uint32]uint64{20: 1})}}))
	// an older module whose ls_counters had 2 entries
	writeFile(t, dir, "50-0.maps", Encode(&File{PID: 50, Maps: []Map{mapOf("ls_counters", counterImage(t, 2, map[uint32]uint64{0: 1000}))}}))
	writeFile(t, dir, "100.status", []byte("image=0 state=patched reason=ok\nimage=1 state=patched reason=ok\nimage=2 state=unpatched reason=sass-only\n"))
	writeFile(t, dir, "200.status", []byte("image=0 state=patched reason=ok\nimage=- launch_time=off reason=stream-write-failed:1\n"))
	writeFile(t, dir, ".200-0.maps.tmp", []byte("half written"))

	manifest := &abi.Manifest{Maps: []abi.MapInfo{
		{Name: "ls_counters", Layout: layout(t, abi.MapArray, 4, 8, 4)},
		{Name: "smh_counts", Layout: layout(t, abi.MapArray, 4, 8, 256)},
		{Name: "lat_hist", Layout: layout(t, abi.MapArray, 4, 8, 64)},
		{Name: "lat_misc", Layout: layout(t, abi.MapArray, 4, 8, 2)},
	}}
	ten, err := ReadTenant(dir, manifest)
	if err != nil {
		t.Fatal(err)
	}
	if ten.Processes != 3 || ten.Patched != 3 || ten.Unpatched != 1 || ten.Reasons["sass-only"] != 1 {
		t.Errorf("processes %d patched %d unpatched %d reasons %v", ten.Processes, ten.Patched, ten.Unpatched, ten.Reasons)
	}
	// probes ran in process 200, only its launch times stopped: not "off"
	if len(ten.Off) != 0 || ten.LaunchTimeOff["stream-write-failed:1"] != 1 {
		t.Errorf("off %v, launch times off %v", ten.Off, ten.LaunchTimeOff)
	}
	if len(ten.Skipped) != 1 || !strings.Contains(ten.Skipped[0], "50-0.maps") {
		t.Errorf("skipped %v, want the older module's file", ten.Skipped)
	}
	sum := Summarize(ten, programs.Builtin(), []string{"launch-stats", "sm-histogram", "launch-latency"})
	if len(sum) != 3 {
		t.Fatalf("summary %+v", sum)
	}
	lsum := sum[0]
	if lsum.Counters["launches"] != 4 || lsum.Counters["blocks"] != 13 || lsum.Means["meanBlockNs"] != 10600.0/13 {
		t.Errorf("launch-stats %+v", lsum)
	}
	if s := sum[1].SMs; s == nil || s.Used != 3 || s.Min != 3 || s.MinSM != 7 || s.Max != 5 || s.MaxSM != 1 || s.Total != 12 {
		t.Errorf("sm-histogram %+v", sum[1].SMs)
	}
	h := sum[2].Histograms["lat_hist"]
	// 4 launches: 1 in [512,1024), 2 in [1024,2048), 1 in [2^19, 2^20)
	if h.Count != 4 || h.P50 != 1536 || h.P99 != 1<<20 || h.Unit != "ns" {
		t.Errorf("latency %+v", h)
	}
	if c := sum[2].Counters; c["noLaunchTime"] != 0 || len(sum[2].Missing) != 1 || sum[2].Missing[0] != "lat_misc" {
		t.Errorf("launch-latency counters %v missing %v", c, sum[2].Missing)
	}
}

// launch-stats sums exit stamps minus entry stamps: a reading taken while a
// block runs holds its entry stamp alone and must show no mean block time.
func TestMeanBlockTimeWhileBlocksRun(t *testing.T) {
	manifest := &abi.Manifest{Maps: []abi.MapInfo{{Name: "ls_counters", Layout: layout(t, abi.MapArray, 4, 8, 4)}}}
	t0 := uint64(1_790_000_000_000_000_000) // a %globaltimer reading (ns since 1970); a variable: the sums wrap
	for _, tc := range []struct {
		name          string
		blocks, exits uint64
		ns            uint64
		wantMean      float64
		wantInFlight  bool
	}{
		// 3 blocks of 1000, 2000 and 3000 ns, all done
		{"settled", 3, 3, (t0 + 1000 - t0) + (t0 + 2000 - t0) + (t0 + 3000 - t0), 2000, false},
		// the third block has entered, not exited: its -t0 is in the sum
		{"one block running", 3, 2, 3000 - t0, 0, true},
		// counts equal but an entry stamp landed before its count did
		{"stamp ahead of its count", 2, 2, 3000 - t0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "1-0.maps", Encode(&File{PID: 1, Maps: []Map{
				mapOf("ls_counters", counterImage(t, 4, map[uint32]uint64{0: 1, 1: tc.blocks, 2: tc.ns, 3: tc.exits}))}}))
			writeFile(t, dir, "1.status", []byte("image=0 state=patched reason=ok\n"))
			ten, err := ReadTenant(dir, manifest)
			if err != nil {
				t.Fatal(err)
			}
			s := Summarize(ten, programs.Builtin(), []string{"launch-stats"})[0]
			mean, ok := s.Means["meanBlockNs"]
			inFlight := slices.Contains(s.InFlight, "meanBlockNs")
			if tc.wantInFlight {
				if ok || !inFlight {
					t.Errorf("mean %v (present %v), in flight %v: want no mean, in flight", mean, ok, s.InFlight)
				}
			} else if !ok || mean != tc.wantMean || inFlight {
				t.Errorf("mean %v (present %v), in flight %v: want %v", mean, ok, s.InFlight, tc.wantMean)
			}
		})
	}
}

// Two processes: one finished (3 blocks, 6000 ns), one whose last copy-out
// caught a block running (it died there). The mean is the finished one's;
// the summary says a reading was in flight.
func TestMeanBlockTimeOverSettledImages(t *testing.T) {
	manifest := &abi.Manifest{Maps: []abi.MapInfo{{Name: "ls_counters", Layout: layout(t, abi.MapArray, 4, 8, 4)}}}
	t0 := uint64(1_790_000_000_000_000_000)
	dir := t.TempDir()
	writeFile(t, dir, "1-0.maps", Encode(&File{PID: 1, Final: true, Maps: []Map{
		mapOf("ls_counters", counterImage(t, 4, map[uint32]uint64{0: 1, 1: 3, 2: 6000, 3: 3}))}}))
	writeFile(t, dir, "2-0.maps", Encode(&File{PID: 2, Maps: []Map{
		mapOf("ls_counters", counterImage(t, 4, map[uint32]uint64{0: 1, 1: 2, 2: 500 - t0, 3: 1}))}}))
	writeFile(t, dir, "1.status", []byte("image=0 state=patched reason=ok\n"))
	writeFile(t, dir, "2.status", []byte("image=0 state=patched reason=ok\n"))
	ten, err := ReadTenant(dir, manifest)
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(ten, programs.Builtin(), []string{"launch-stats"})[0]
	if got, ok := s.Means["meanBlockNs"]; !ok || got != 2000 || !slices.Contains(s.InFlight, "meanBlockNs") {
		t.Errorf("mean %v (present %v), in flight %v: want 2000 from the finished process, in flight noted", got, ok, s.InFlight)
	}
	if s.Counters["blocks"] != 5 || s.Counters["blockExits"] != 4 {
		t.Errorf("counters %v", s.Counters)
	}
}

func TestReadTenantMissingDir(t *testing.T) {
	ten, err := ReadTenant(filepath.Join(t.TempDir(), "none"), nil)
	if err != nil || ten.Processes != 0 || len(ten.Maps) != 0 {
		t.Fatalf("%+v %v", ten, err)
	}
}

func TestLog2Histogram(t *testing.T) {
	counts := make([]uint64, 64)
	counts[0] = 50 // value 0
	counts[5] = 49 // [16, 32)
	counts[8] = 1  // [128, 256)
	h := Log2Histogram(counts)
	if h.Count != 100 || h.P50 != 0 || h.P99 != 32 || h.Max != 256 {
		t.Errorf("%+v", h)
	}
	if z := Log2Histogram(make([]uint64, 64)); z != (HistSummary{}) {
		t.Errorf("empty %+v", z)
	}
}
