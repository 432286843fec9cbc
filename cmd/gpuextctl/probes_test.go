package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/devrt/probefiles/maps"
	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/gpubpf/compile"
	"github.com/gpuext/gpuext/gpubpf/devmap"
	"github.com/gpuext/gpuext/gpubpf/helpers"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/internal/admission"
)

// probeState lays out a state dir as admission and the interposer leave it:
// tenant 7 with all three probes and two processes' copy-outs, tenant 8
// without probes.
func probeState(t *testing.T) string {
	t.Helper()
	state := t.TempDir()
	set := []string{"launch-stats", "sm-histogram", "launch-latency"}
	b, err := compile.NewCompiler(programs.Builtin(), func() (helpers.Library, error) { return helpers.Library{}, nil }).Compile(set)
	if err != nil {
		t.Fatal(err)
	}
	for id, tf := range map[string]tenantcfg.File{
		"7": {TenantID: 7, TenantKey: "nri/ctr/abc", Policy: "default", Probes: set},
		"8": {TenantID: 8, TenantKey: "nri/ctr/def", Policy: "batch", Probes: []string{}},
	} {
		dir := filepath.Join(state, "tenants", id)
		os.MkdirAll(dir, 0o755)
		data, _ := json.Marshal(tf)
		os.WriteFile(filepath.Join(dir, tenantcfg.ConfigFileName), data, 0o644)
		if len(tf.Probes) > 0 {
			if err := b.WriteDir(filepath.Join(dir, admission.TenantProbesDir)); err != nil {
				t.Fatal(err)
			}
		}
	}
	acct := filepath.Join(state, "acct", "7", "probes")
	os.MkdirAll(acct, 0o777)
	counts := map[string]map[uint32]uint64{
		"ls_counters": {0: 10, 1: 40, 2: 40 * 2500, 3: 40},
		"smh_counts":  {0: 16, 1: 14, 2: 10},
		"lat_hist":    {12: 18, 14: 2}, // 18 launches in [2048, 4096) ns, 2 in [8192, 16384)
	}
	for _, pid := range []uint32{100, 200} {
		f := &maps.File{PID: pid, Final: pid == 100}
		for _, mi := range b.Manifest.Maps {
			im := devmap.NewImage(mi.Layout)
			for i, v := range counts[mi.Name] {
				im.Update(binary.LittleEndian.AppendUint32(nil, i), binary.LittleEndian.AppendUint64(nil, v/2), devmap.FlagAny, 0)
			}
			f.Maps = append(f.Maps, maps.Map{Name: mi.Name, Present: true, Bytes: im.Bytes})
		}
		os.WriteFile(filepath.Join(acct, strconv.FormatUint(uint64(pid), 10)+"-0.maps"), maps.Encode(f), 0o644)
	}
	os.WriteFile(filepath.Join(acct, "100.status"), []byte("image=0 state=patched reason=ok kernels=1/1\n"), 0o644)
	os.WriteFile(filepath.Join(acct, "200.status"), []byte("image=0 state=patched reason=ok kernels=1/1\n"+
		"image=1 state=unpatched reason=sass-only kernels=0 jit_ms=0 api=cuModuleLoadData kind=cubin\n"), 0o644)
	return state
}

func TestProbesShowsTenantCounts(t *testing.T) {
	state := probeState(t)
	var out bytes.Buffer
	if err := run([]string{"probes", "--state-dir", state}, &out); err != nil {
		t.Fatal(err)
	}
	table := out.String()
	t.Log("\n" + table)
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a header and tenant 7 only (tenant 8 has no probes):\n%s", table)
	}
	for _, want := range []string{"7", "nri/ctr/abc", "launch-latency,launch-stats,sm-histogram", "1 (1 sass-only)",
		" 10 ", " 40 ", "2.5µs", "3 used, 10..16 blocks", "3.185µs", "16.384µs"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("tenant row lacks %q:\n%s", want, table)
		}
	}

	out.Reset()
	if err := run([]string{"probes", "--json", "--state-dir", state}, &out); err != nil {
		t.Fatal(err)
	}
	var rows []ProbesRow
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatalf("probes --json: %v\n%s", err, out.String())
	}
	r := rows[0]
	if len(rows) != 1 || r.Tenant != 7 || r.Processes != 2 || r.Patched != 2 || r.Unpatched != 1 ||
		*r.Launches != 10 || *r.Blocks != 40 || *r.MeanBlockNs != 2500 || r.SMs.Used != 3 || r.LaunchLatency.Count != 20 {
		t.Errorf("probes --json: %s", out.String())
	}
}

func TestProbesEmptyStateDir(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"probes", "--json", "--state-dir", filepath.Join(t.TempDir(), "none")}, &out); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out.String()) != "[]" {
		t.Errorf("no tenants: %q", out.String())
	}
}

// probes read: one accounting directory, as a program run by hand leaves it.
func TestProbesReadDir(t *testing.T) {
	state := probeState(t)
	var out bytes.Buffer
	err := run([]string{"probes", "read", "--manifest", filepath.Join(state, "tenants", "7", "probes", "manifest.json"),
		filepath.Join(state, "acct", "7", "probes")}, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	for _, want := range []string{"processes 2, images patched 2, unpatched 1 (1 sass-only)",
		"launch-stats: blockExits=40 blockNs=100000 blocks=40 launches=10 meanBlockNs=2500.0",
		"sm-histogram: smsUsed=3 minBlocks=10(sm2) maxBlocks=16(sm0)",
		"launch-latency: clockBehind=0 noLaunchTime=0 lat_hist: count=20 p50=3185ns p99=16384ns"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("probes read lacks %q", want)
		}
	}
}

// A tenant with launch-count alone (no timing) shows its launches and
// blocks; its mean block time is "-"; one whose last reading caught blocks
// running under launch-stats shows "running".
func TestProbesLaunchCountAndRunningBlocks(t *testing.T) {
	state := t.TempDir()
	t0 := uint64(1_790_000_000_000_000_000) // an entry stamp whose block has not exited
	for _, tc := range []struct {
		id     uint32
		set    []string
		counts map[string]map[uint32]uint64
	}{
		{9, []string{"launch-count"}, map[string]map[uint32]uint64{"lc_counters": {0: 6, 1: 24}}},
		// 5 blocks entered, 4 exited: one still running when the copy was taken
		{10, []string{"launch-stats"}, map[string]map[uint32]uint64{"ls_counters": {0: 1, 1: 5, 2: 4000 - t0, 3: 4}}},
	} {
		b, err := compile.NewCompiler(programs.Builtin(), func() (helpers.Library, error) { return helpers.Library{}, nil }).Compile(tc.set)
		if err != nil {
			t.Fatal(err)
		}
		id := strconv.FormatUint(uint64(tc.id), 10)
		dir := filepath.Join(state, "tenants", id)
		os.MkdirAll(dir, 0o755)
		data, _ := json.Marshal(tenantcfg.File{TenantID: tc.id, TenantKey: "nri/ctr/" + id, Policy: "default", Probes: tc.set})
		os.WriteFile(filepath.Join(dir, tenantcfg.ConfigFileName), data, 0o644)
		if err := b.WriteDir(filepath.Join(dir, admission.TenantProbesDir)); err != nil {
			t.Fatal(err)
		}
		acct := filepath.Join(state, "acct", id, "probes")
		os.MkdirAll(acct, 0o777)
		f := &maps.File{PID: 300}
		for _, mi := range b.Manifest.Maps {
			im := devmap.NewImage(mi.Layout)
			for i, v := range tc.counts[mi.Name] {
				im.Update(binary.LittleEndian.AppendUint32(nil, i), binary.LittleEndian.AppendUint64(nil, v), devmap.FlagAny, 0)
			}
			f.Maps = append(f.Maps, maps.Map{Name: mi.Name, Present: true, Bytes: im.Bytes})
		}
		os.WriteFile(filepath.Join(acct, "300-0.maps"), maps.Encode(f), 0o644)
		os.WriteFile(filepath.Join(acct, "300.status"), []byte("image=0 state=patched reason=ok kernels=1/1\n"), 0o644)
	}
	var out bytes.Buffer
	if err := run([]string{"probes", "--json", "--state-dir", state}, &out); err != nil {
		t.Fatal(err)
	}
	var rows []ProbesRow
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("probes --json: %v\n%s", err, out.String())
	}
	count, stats := rows[0], rows[1]
	if count.Launches == nil || *count.Launches != 6 || count.Blocks == nil || *count.Blocks != 24 || count.MeanBlockNs != nil {
		t.Errorf("launch-count tenant: %s", out.String())
	}
	if stats.MeanBlockNs != nil || !stats.BlocksRunning || *stats.Blocks != 5 {
		t.Errorf("launch-stats tenant with a block running: %s", out.String())
	}
	out.Reset()
	if err := run([]string{"probes", "--state-dir", state}, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], " 24 ") || !strings.Contains(lines[2], "running") {
		t.Errorf("table:\n%s", out.String())
	}
}

// A process whose context ended where the interposer could not see it
// could not make its last copy: the table says the counts are short, and --json has
// the number, instead of the counts just being lower.
func TestProbesSaysWhenALastCopyIsMissing(t *testing.T) {
	state := probeState(t)
	acct := filepath.Join(state, "acct", "7", "probes")
	if err := os.WriteFile(filepath.Join(acct, "100.status"), []byte("image=0 state=patched reason=ok kernels=1/1\n"+
		"image=0 ctx=0 state=unbound reason=unloaded final=missed copies=3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run([]string{"probes", "--state-dir", state}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "tenant 7: 1 image(s) without their last copy") {
		t.Errorf("no word of the missing copy:\n%s", out.String())
	}
	out.Reset()
	if err := run([]string{"probes", "--json", "--state-dir", state}, &out); err != nil {
		t.Fatal(err)
	}
	var rows []ProbesRow
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil || len(rows) != 1 || rows[0].MissedFinal != 1 || rows[0].Patched != 2 {
		t.Errorf("probes --json: missedFinal should be 1 and the image still patched: %v\n%s", err, out.String())
	}
}

// --kernel takes what probe-kernels.gpuext.io takes: a name is a line of
// module.conf, so one with a newline (another line, e.g. a map) is refused
// and nothing is written.
func TestProbesCompileRefusesABadKernelName(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "probes")
	var out bytes.Buffer
	err := run([]string{"probes", "compile", "--out", dir, "--kernel", "k\nmap x y 8", "launch-count"}, &out)
	if err == nil || !strings.Contains(err.Error(), "not a PTX identifier") || !strings.Contains(err.Error(), "--kernel") {
		t.Errorf("error %v, want the --kernel value named as not a PTX identifier", err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("%s written: %v", dir, err)
	}
}
