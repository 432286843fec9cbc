package devrt

// bpftime-style programs from an operator's probe directory through the
// interposer, against the fake libcuda.

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/devrt/probefiles/maps"
	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/compile"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/lib/testutil"
)

// Our own programs in bpftime's style (threadhist, kernelretsnoop,
// launchlate and cuda-counter shapes), loaded from a probe directory and
// compiled into one module: the interposer patches the image holding the
// kernel their sections name, binds every map (the per-thread array, the
// GPU array, the GPU ring buffer, the hash) and copies it out with the
// manifest's layout, so every view of the four probes has its map; and it
// writes bpf_get_current_pid_tgid's value, (tgid << 32) | the binding
// thread's tid, into the module once.
func TestProbesBpftimeFromAProbeDirectory(t *testing.T) {
	names := []string{"thread-hist", "ret-snoop", "launch-bins", "call-counter"}
	cat, err := programs.BuiltinWithDir(testutil.BpftimeDir(t, "", names...))
	if err != nil {
		t.Fatal(err)
	}
	b, err := compile.NewCompiler(cat, nil).Compile(names)
	if err != nil {
		t.Fatal(err)
	}
	tn := probeTenant(t, 43, false)
	if err := b.WriteDir(filepath.Join(tn.dir, "probes")); err != nil {
		t.Fatal(err)
	}
	r := tn.runImages(nil, "mod", filepath.Join("testdata", "ptx", "grid.ptx"), "launch", "2")
	st := r.status(t)
	var patched bool
	for _, s := range st {
		patched = patched || (s["image"] == "0" && s["state"] == "patched" && s["reason"] == "ok" && s["kernels"] == "1/1")
	}
	if !patched {
		t.Fatalf("status %v, want image 0 patched, its kernel probed", st)
	}
	img := string(r.image(t, "image-0.ptx"))
	for _, sym := range []string{"__gpuext_map_th_count", "__gpuext_map_rs_events", "__gpuext_map_lb_hist", "__gpuext_map_cc_start", abi.SymPidTgid} {
		if !strings.Contains(img, sym) {
			t.Errorf("the driver's PTX lacks %s", sym)
		}
	}
	// the app's one thread binds the image: tid = pid
	want := fmt.Sprintf("cuMemcpyHtoDAsync_v2 dst=%s bytes=8 value=%d ", abi.SymPidTgid, uint64(r.pid)<<32|uint64(r.pid))
	if n := countPrefix(tn.driverCalls(r.pid), want); n != 1 {
		t.Errorf("%d writes of %q, want 1", n, want)
	}

	m := readMaps(t, filepath.Join(r.probes, fmt.Sprintf("%d-0.maps", r.pid)))
	le := binary.LittleEndian
	for _, mi := range b.Manifest.Maps {
		sym := m.maps[mi.Name]
		l := mi.Layout
		if len(sym) < abi.MapHdrSize || uint64(len(sym)) != abi.MapHdrSize+l.DataSize ||
			[5]uint32{le.Uint32(sym), le.Uint32(sym[4:]), le.Uint32(sym[8:]), le.Uint32(sym[12:]), le.Uint32(sym[16:])} != [5]uint32{uint32(l.Type), l.KeySize, l.ValueSize, l.MaxEntries, l.NBuckets} {
			t.Errorf("map %s: %d bytes copied out, manifest %+v", mi.Name, len(sym), l)
		}
	}
	if l := layoutOf(b.Manifest, "th_count"); l.Type != abi.MapPerThread || l.NBuckets != abi.MapThreadSlots {
		t.Errorf("th_count: %+v, want a per-thread map of %d rows", l, abi.MapThreadSlots)
	}
	if l := layoutOf(b.Manifest, "rs_events"); l.Type != abi.MapRingbuf {
		t.Errorf("rs_events: %+v, want a ring buffer", l)
	}
	ten, err := maps.ReadTenant(r.probes, &b.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	if len(ten.Skipped) > 0 || ten.Patched != 1 {
		t.Fatalf("tenant: %d patched, skipped %v", ten.Patched, ten.Skipped)
	}
	for _, s := range maps.Summarize(ten, cat, names) {
		if len(s.Missing) > 0 {
			t.Errorf("%s: views without their map: %v", s.Name, s.Missing)
		}
	}
}

func layoutOf(m abi.Manifest, name string) abi.MapLayout {
	for _, mi := range m.Maps {
		if mi.Name == name {
			return mi.Layout
		}
	}
	return abi.MapLayout{}
}
