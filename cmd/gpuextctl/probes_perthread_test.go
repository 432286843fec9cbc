package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuext/gpuext/devrt/probe"
	"github.com/gpuext/gpuext/devrt/probe/compile"
	"github.com/gpuext/gpuext/devrt/probe/helpers"
	"github.com/gpuext/gpuext/devrt/probe/maps"
	"github.com/gpuext/gpuext/devrt/probe/ptx"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/internal/probetest"
)

// `gpuextctl probes read` shows a per-thread view (a bpftime-style
// threadhist from the config's probeDir): the rows used, their sum, the
// fewest and most of a row with the row, the log2 buckets of the rows, and
// the accesses by threads past the last row.
func TestProbesReadPerThreadView(t *testing.T) {
	cfg := config.Default()
	cfg.ProbeDir = probetest.BpftimeDir(t, "", "thread-hist")
	cat, err := cfg.ProbeCatalog()
	if err != nil {
		t.Fatal(err)
	}
	b, err := compile.NewCompiler(cat, func() (helpers.Library, error) { return helpers.Library{}, nil }).Compile([]string{"thread-hist"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	manifest, acct := filepath.Join(dir, "manifest.json"), filepath.Join(dir, "probes")
	if err := os.Mkdir(acct, 0o755); err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	f := &maps.File{PID: 9, Seq: 1, Final: true}
	for _, m := range b.Manifest.Maps {
		im := ptx.NewImage(m.Layout)
		d := im.Bytes[probe.MapHdrSize:]
		for g := 0; g < 10; g++ { // rows 0-9 exited 3 times, row 10 7 times
			le.PutUint64(d[8*g:], 3)
		}
		le.PutUint64(d[8*10:], 7)
		le.PutUint64(d[8*m.Layout.NBuckets:], 2) // two accesses past the last row
		f.Maps = append(f.Maps, maps.Map{Name: m.Name, Present: true, Layout: m.Layout, Bytes: im.Bytes})
	}
	for name, data := range map[string][]byte{"9-0.maps": maps.Encode(f), "9.status": []byte("image=0 state=patched reason=ok\n")} {
		if err := os.WriteFile(filepath.Join(acct, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(manifest, b.ManifestJSON(), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := probesCmd(cfg, []string{"read", "--manifest", manifest, acct}, &out); err != nil {
		t.Fatal(err)
	}
	want := "processes 1, images patched 1, unpatched 0\n" +
		"thread-hist:\n" +
		"  thread-hist: th_count: per-thread, 65536 rows, 2 accesses past the last row\n" +
		"    exits: rows used=11 sum=37 min=3 (row 0) max=7 (row 10) log2: [2,4)=10 [4,8)=1\n"
	if out.String() != want {
		t.Errorf("probes read:\n%s\nwant:\n%s", out.String(), want)
	}
}
