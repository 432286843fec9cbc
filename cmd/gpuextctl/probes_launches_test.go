package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/devrt/probefiles/launches"
)

// The interposer's launch table next to the device counts: LAUNCHES is the
// device's count plus the host's for the kernels the probes could not see,
// each part labelled; COVERAGE is the share of launches observed; the
// reasons, the host latency and the kernel table follow.
func TestProbesShowsHostMeasuredLaunches(t *testing.T) {
	state := probeState(t) // tenant 7: launch-stats counted 10 launches, 40 blocks device-side
	long := strings.Repeat("E", launches.NameSize-1)
	f := &launches.File{PID: 200, Final: true, Latency: true, Kernels: 2, LatCalibNs: 8000,
		Coverage: []launches.Coverage{
			{Measured: launches.Device, Reason: "ok", Kernels: 1, Launches: 10, Blocks: 40},
			{Measured: launches.Host, Reason: "sass-only", Kernels: 1, Launches: 30, Blocks: 120},
			{Measured: launches.None, Reason: "graph-not-instantiated-seen", Launches: 2},
		},
		Rows: []launches.Row{
			{KernelID: 1, Name: long, NameLen: 1456, Measured: launches.Host, Reason: "sass-only", Image: 1, Kernels: 1,
				Launches: 30, GraphLaunches: 20, Blocks: 120, GridLast: [3]uint32{4, 1, 1}, BlockLast: [3]uint32{256, 1, 1},
				LatCount: 30, LatSumNs: 30 * 50000, LatMinNs: 40000, LatMaxNs: 70000},
			{KernelID: 2, Name: "_Z4vaddPKfS0_Pfi", NameLen: 16, Measured: launches.Device, Reason: "ok", Image: 0, Kernels: 1,
				Launches: 10, Blocks: 40},
		}}
	f.LatHist[15] = 30 // [32768, 65536) ns
	if err := os.WriteFile(filepath.Join(state, "acct", "7", "probes", "200.launches"), launches.Encode(f), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run([]string{"probes", "--kernels", "5", "--state-dir", state}, &out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	t.Log("\n" + text)
	for _, want := range []string{"40 (10 device, 30 host) +2 unseen", "95.2%", "160 (40 device, 120 host)",
		"3.185µs(d)", "launches observed: 30 host (sass-only), 10 device (ok), 2 none (graph-not-instantiated-seen)",
		"tenant 7 kernels:", "...(1456 bytes)", "host      sass-only", "4x1x1", "256x1x1", "50µs", "_Z4vaddPKfS0_Pfi"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}

	out.Reset()
	if err := run([]string{"probes", "read", filepath.Join(state, "acct", "7", "probes")}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "launches 40 host +2 unseen, observed 95.2%\nlaunches observed: 30 host (sass-only)") {
		t.Errorf("probes read:\n%s", out.String())
	}

	out.Reset()
	if err := run([]string{"probes", "--json", "--state-dir", state}, &out); err != nil {
		t.Fatal(err)
	}
	var rows []ProbesRow
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatal(err)
	}
	r := rows[0]
	if *r.Launches != 40 || r.LaunchesBy[launches.Device] != 10 || r.LaunchesBy[launches.Host] != 30 || r.LaunchesBy[launches.None] != 2 ||
		r.Coverage == nil || r.Coverage.Host != 30 || r.Coverage.None != 2 || r.HostLatency == nil || r.HostLatency.Count != 30 ||
		len(r.Kernels) != 2 || !r.Kernels[0].Truncated {
		t.Errorf("probes --json: %s", out.String())
	}
}

// Without a device counter (no launch-count or launch-stats selected) the
// host's count of every launch is the number, labelled host.
func TestMeasuredSumWithoutDeviceCounter(t *testing.T) {
	tab := map[launches.Measured]uint64{launches.Device: 4, launches.Host: 6}
	total, by := measuredSum(nil, tab, true)
	if *total != 10 || by[launches.Host] != 10 || len(by) != 1 {
		t.Errorf("no device counter: %d %v, want 10 host", *total, by)
	}
	if got := measuredCell(total, by); got != "10 host" {
		t.Errorf("cell %q", got)
	}
	dev := uint64(4)
	total, by = measuredSum(&dev, tab, true)
	if *total != 10 || by[launches.Device] != 4 || by[launches.Host] != 6 {
		t.Errorf("device counter 4: %d %v", *total, by)
	}
	if total, by = measuredSum(nil, nil, false); total != nil || by != nil {
		t.Errorf("nothing: %v %v", total, by)
	}
}
