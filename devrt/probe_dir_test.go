package devrt

// The interposer with probes from an operator's probe directory (the
// config's probeDir) and with a module.conf line past the parser's bound,
// against the fake libcuda.

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/compile"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/lib/testutil"
)

// A module.conf line longer than the parser reads (a kernel name past its
// bound) turns the probes off with a status line naming the line; the
// image loads as shipped. Before, the line was cut and the kernel silently
// went unprobed.
func TestProbesConfLineTooLong(t *testing.T) {
	tn := probeTenant(t, 41, true)
	conf := filepath.Join(tn.dir, "probes", "module.conf")
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, append(b, []byte("kernel _Z"+strings.Repeat("k", 8200)+"\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	line := strings.Count(string(b), "\n") + 1
	in := filepath.Join("testdata", "ptx", "multi.ptx")
	r := tn.runImages(nil, "mod", in, "launch", "1")
	st := r.status(t)
	if len(st) != 1 || st[0]["image"] != "-" || st[0]["state"] != "off" || st[0]["reason"] != fmt.Sprintf("module.conf:%d:line-too-long", line) {
		t.Errorf("status %v, want image=- state=off reason=module.conf:%d:line-too-long", st, line)
	}
	orig, _ := os.ReadFile(in)
	if got := r.image(t, "image-0.ptx"); string(got) != string(orig) {
		t.Errorf("with the probes off the driver got a changed image")
	}
}

// The example probes of examples/probes, loaded from a probe directory
// and compiled with the helper library, go through the interposer as the
// built-in ones do: the image is patched, and every map of the bundle
// (hash, ring buffer, per-warp arrays) is bound and copied out with the
// layout of the manifest.
func TestProbesFromAProbeDirectory(t *testing.T) {
	dir := testutil.ExampleDir(t, "kernel-block-hist", "slow-blocks")
	cat, err := programs.BuiltinWithDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := compile.NewCompiler(cat, nil).Compile([]string{"kernel-block-hist", "slow-blocks"})
	if err != nil {
		t.Fatal(err)
	}
	tn := probeTenant(t, 42, false)
	if err := b.WriteDir(filepath.Join(tn.dir, "probes")); err != nil {
		t.Fatal(err)
	}
	r := tn.runImages(nil, "mod", filepath.Join("testdata", "ptx", "multi.ptx"), "launch", "2")
	st := r.status(t)
	var patched bool
	for _, s := range st {
		patched = patched || (s["image"] == "0" && s["state"] == "patched" && s["reason"] == "ok")
	}
	if !patched {
		t.Fatalf("status %v, want image 0 patched", st)
	}
	if !strings.Contains(string(r.image(t, "image-0.ptx")), "__gpuext_map_kbh_hist") {
		t.Errorf("the driver's PTX lacks the directory probes' maps")
	}
	m := readMaps(t, filepath.Join(r.probes, fmt.Sprintf("%d-0.maps", r.pid)))
	if int(m.count) != len(b.Manifest.Maps) {
		t.Fatalf("maps file has %d maps, the manifest %d", m.count, len(b.Manifest.Maps))
	}
	le := binary.LittleEndian
	for _, mi := range b.Manifest.Maps {
		sym := m.maps[mi.Name]
		if len(sym) < abi.MapHdrSize {
			t.Errorf("map %s: %d bytes copied out", mi.Name, len(sym))
			continue
		}
		l := mi.Layout
		if got := [4]uint32{le.Uint32(sym), le.Uint32(sym[4:]), le.Uint32(sym[8:]), le.Uint32(sym[12:])}; got != [4]uint32{uint32(l.Type), l.KeySize, l.ValueSize, l.MaxEntries} ||
			uint64(len(sym)) != abi.MapHdrSize+l.DataSize {
			t.Errorf("map %s: descriptor %v and %d bytes, manifest %+v", mi.Name, got, len(sym), l)
		}
	}
	for _, name := range []string{"kbh_hist", "kbh_start", "sb_records", "sb_start"} {
		if _, ok := m.maps[name]; !ok {
			t.Errorf("map %s not copied out", name)
		}
	}
}
