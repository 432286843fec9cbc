package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/lib/testutil"
)

// `gpuextctl probes catalog` shows an operator, per probe, which programs
// run and which were refused and why: a probe directory's object with one
// program that passes, one with an unbounded loop and one at bpftime's
// memory-access point loads, and the two refusals are named with their
// reasons beside the built-in probes.
func TestProbesCatalogShowsVerdicts(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(testutil.RepoRoot(), "gpubpf", "programs", "testdata", "dir", "mixed.bpf.c")
	testutil.Build(t, src, filepath.Join(dir, "mixed.bpf.o"))
	desc := `{"name": "mixed", "description": "three verdicts", "views": [{"map": "mixed_counts", "kind": "counters", "fields": ["exits", "spins"]}]}`
	if err := os.WriteFile(filepath.Join(dir, "mixed.json"), []byte(desc), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.ProbeDir = dir
	var out bytes.Buffer
	if err := probesCmd(cfg, []string{"catalog"}, &out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"launch-count: runs ", "(built in)",
		"mixed: runs mixed_ok (" + filepath.Join(dir, "mixed.json") + ")\n",
		"mixed: refused mixed_mem (section kprobe/__memcapture): section \"kprobe/__memcapture\" is bpftime's memory-access attach point",
		"mixed: refused mixed_spin (section gpuext/kernel_entry): prog mixed_spin: insn ",
		"mixed.bpf.c:", "unbounded loop",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("probes catalog does not say %q:\n%s", want, text)
		}
	}
	out.Reset()
	if err := probesCmd(cfg, []string{"catalog", "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var rows []ProbeVerdicts
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Name == "mixed" && (strings.Join(r.Runs, ",") != "mixed_ok" || len(r.Refused) != 2 || r.Refused[1].Program != "mixed_spin") {
			t.Errorf("--json mixed: %+v", r)
		}
	}
}
