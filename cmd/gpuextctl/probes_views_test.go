package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuext/gpuext/devrt/probefiles/maps"
	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/compile"
	"github.com/gpuext/gpuext/gpubpf/devmap"
	"github.com/gpuext/gpuext/gpubpf/helpers"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/lib/testutil"
)

// `gpuextctl probes read` with the config's probeDir shows a hash view's
// keys (most blocks first) and a records view's last records, fields in
// the order the probe's descriptor declares them.
func TestProbesReadHashAndRecordsViews(t *testing.T) {
	le := binary.LittleEndian
	out := probesReadDir(t, testutil.ExampleDir(t, "kernel-block-hist", "slow-blocks"),
		[]string{"kernel-block-hist", "slow-blocks"}, func(m abi.MapInfo, im *devmap.Image) {
			switch m.Name {
			case "kbh_hist":
				for _, e := range []struct {
					kernel uint64
					bucket uint32
					n      uint64
				}{{0xaa, 10, 3}, {0xbb, 14, 5}} {
					k := append(le.AppendUint32(le.AppendUint64(nil, e.kernel), e.bucket), 0, 0, 0, 0)
					if im.Update(k, le.AppendUint64(nil, e.n), devmap.FlagAny, 0) != 0 {
						t.Fatal("hash update")
					}
				}
			case "sb_records":
				for blk := range uint32(3) {
					rec := le.AppendUint64(le.AppendUint32(le.AppendUint32(le.AppendUint64(nil, 0xbb), blk), 7), 11000+uint64(blk))
					if im.RingbufOutput(rec, 0) != 0 {
						t.Fatal("ringbuf output")
					}
				}
			}
		})
	want := "processes 1, images patched 1, unpatched 0\n" +
		"kernel-block-hist:\n" +
		"  kernel-block-hist: kbh_hist: 2 keys (blocks=8 total)\n" +
		fmt.Sprintf("    kernel=0x%016x bucket=14 -> blocks=5\n", 0xbb) +
		fmt.Sprintf("    kernel=0x%016x bucket=10 -> blocks=3\n", 0xaa) +
		"slow-blocks:\n" +
		"  slow-blocks: sb_records: 3 records, 0 dropped, last 3:\n" +
		fmt.Sprintf("    kernel=0x%016x block=0 sm=7 ns=11000\n", 0xbb) +
		fmt.Sprintf("    kernel=0x%016x block=1 sm=7 ns=11001\n", 0xbb) +
		fmt.Sprintf("    kernel=0x%016x block=2 sm=7 ns=11002\n", 0xbb)
	if out != want {
		t.Errorf("probes read:\n%s\nwant:\n%s", out, want)
	}
}

// probesReadDir compiles the probes names from the config's probeDir dir,
// lets fill write each map's image, writes one process's map file, status
// and the manifest as the interposer would, and returns what `gpuextctl
// probes read` prints for them.
func probesReadDir(t *testing.T, dir string, names []string, fill func(abi.MapInfo, *devmap.Image)) string {
	t.Helper()
	cfg := config.Default()
	cfg.ProbeDir = dir
	cat, err := admission.ProbeCatalog(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := compile.NewCompiler(cat, func() (helpers.Library, error) { return helpers.Library{}, nil }).Compile(names)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	manifest, acct := filepath.Join(tmp, "manifest.json"), filepath.Join(tmp, "probes")
	if err := os.Mkdir(acct, 0o755); err != nil {
		t.Fatal(err)
	}
	f := &maps.File{PID: 9, Seq: 1, Final: true}
	for _, m := range b.Manifest.Maps {
		im := devmap.NewImage(m.Layout)
		fill(m, im)
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
	return out.String()
}
