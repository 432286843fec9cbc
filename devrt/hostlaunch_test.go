package devrt

// Tests of the host-side launch table (devrt/lib/probe_hostlaunch.c,
// docs/device-probes.md "What is measured where"): the interposer over the
// fake libcuda counts every launch, says for each kernel whether the device
// probes count it (device) or only the host does (host, with the image's
// reason), counts graph replays by the graph's kernel nodes, times
// host-measured launches with events, and the root reader
// (devrt/probefiles/maps, devrt/probefiles/launches) reads it back.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/devrt/probefiles/launches"
	"github.com/gpuext/gpuext/devrt/probefiles/maps"
	"github.com/gpuext/gpuext/gpubpf/abi"
)

// hostLaunches reads the run's <pid>.launches and the tenant's merged table.
func (r probeRun) hostLaunches(t *testing.T) (*launches.File, *launches.Table) {
	t.Helper()
	f, err := launches.ReadFile(filepath.Join(r.probes, fmt.Sprintf("%d.launches", r.pid)))
	if err != nil {
		t.Fatalf("launches file: %v", err)
	}
	ten, err := maps.ReadTenant(r.probes, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ten.Launches == nil || len(ten.Skipped) != 0 {
		t.Fatalf("tenant read: launches %v, skipped %q", ten.Launches, ten.Skipped)
	}
	return f, ten.Launches
}

func rowNamed(t *testing.T, rows []launches.Row, name string) launches.Row {
	t.Helper()
	for _, r := range rows {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no row %q in %+v", name, rows)
	return launches.Row{}
}

func coverageOf(tab *launches.Table, m launches.Measured, reason string) uint64 {
	for _, c := range tab.Coverage {
		if c.Measured == m && c.Reason == reason {
			return c.Launches
		}
	}
	return 0
}

// A process whose only image is SASS: nothing is patched, yet every launch
// is counted host-side, per kernel, with its grid and block, labelled host
// with the image's reason.
func TestHostLaunchesSASSOnly(t *testing.T) {
	sass := writeTemp(t, "sass.fatbin", fatbin(sassEntry(90)))
	tn := probeTenant(t, 41, true)
	r := tn.runImages(nil, "lib", sass, "launchk", "0", "1", "5", "launchk", "0", "2", "3")
	wantLines(t, r.lines, "lib sass.fatbin ok", "launchk 0 1 5 ok", "launchk 0 2 3 ok")
	f, tab := r.hostLaunches(t)
	if !f.Final || f.PID != uint32(r.pid) || f.Tenant != 41 || f.Kernels != 2 {
		t.Errorf("file header: %+v", f)
	}
	if tab.Launches[launches.Host] != 8 || tab.Launches[launches.Device] != 0 || tab.Launches[launches.None] != 0 {
		t.Errorf("launches by class %v, want 8 host", tab.Launches)
	}
	if got := coverageOf(tab, launches.Host, "sass-only"); got != 8 {
		t.Errorf("host sass-only launches %d, want 8: %+v", got, tab.Coverage)
	}
	k1 := rowNamed(t, tab.Kernels, "fake_i0_k1")
	if k1.Launches != 5 || k1.Blocks != 5*8 || k1.Measured != launches.Host || k1.Reason != "sass-only" ||
		k1.GridLast != [3]uint32{4, 2, 1} || k1.BlockLast != [3]uint32{128, 1, 1} || k1.MaxBlocks != 8 ||
		k1.MaxThreads != 128 || k1.KernelID != abi.KernelID("fake_i0_k1") || k1.LatCount != 0 {
		t.Errorf("kernel row %+v", k1)
	}
	if k2 := rowNamed(t, tab.Kernels, "fake_i0_k2"); k2.Launches != 3 {
		t.Errorf("kernel row %+v, want 3 launches", k2)
	}
	if m, _ := filepath.Glob(filepath.Join(r.probes, "*.maps")); len(m) != 0 {
		t.Errorf("maps files without a patched image: %v", m)
	}
}

// A patched image: its kernels are labelled device, and the device probe's
// own count (the maps) equals the launches the host saw.
func TestHostLaunchesPatchedIsDevice(t *testing.T) {
	fb := writeTemp(t, "app.fatbin", fatbin(sassEntry(90), ptxEntry(t, "multi.ptx", 90)))
	tn := probeTenant(t, 42, true)
	r := tn.runImages(nil, "lib", fb, "launchk", "0", "1", "4")
	wantLines(t, r.lines, "lib app.fatbin ok", "launchk 0 1 4 ok")
	_, tab := r.hostLaunches(t)
	if tab.Launches[launches.Device] != 4 || tab.Launches[launches.Host] != 0 || coverageOf(tab, launches.Device, "ok") != 4 {
		t.Errorf("launches %v coverage %+v, want 4 device", tab.Launches, tab.Coverage)
	}
	if row := rowNamed(t, tab.Kernels, "fake_i0_k1"); row.Measured != launches.Device || row.Image != 0 {
		t.Errorf("row %+v, want device, image 0", row)
	}
	if m := readMaps(t, filepath.Join(r.probes, fmt.Sprintf("%d-0.maps", r.pid))); m.launches() != 4 {
		t.Errorf("device count %d, want 4", m.launches())
	}
}

// A process with a patched image, a SASS-only one and one whose PTX is too
// old: device and host counts side by side, each with its reason; graph
// replays count their kernel nodes; the coverage sums to every launch made;
// a CUTLASS-length name is cut with its length and full-name id kept.
func TestHostLaunchesMixCoversEveryLaunch(t *testing.T) {
	fb := writeTemp(t, "app.fatbin", fatbin(sassEntry(90), ptxEntry(t, "multi.ptx", 90)))
	sass := writeTemp(t, "sass.fatbin", fatbin(sassEntry(90)))
	low := filepath.Join("testdata", "ptx", "sm52.ptx")
	tn := probeTenant(t, 43, true)
	r := tn.runImages(nil, "lib", fb, "lib", sass, "mod", low,
		"launchk", "0", "1", "3", "launchk", "1", "1", "5", "launchk", "2", "1", "2",
		"graph", "1", "3", "4", "10", "launchk", "0", "99", "1")
	wantLines(t, r.lines, "lib app.fatbin ok", "lib sass.fatbin ok", "mod sm52.ptx ok", "launchk 0 1 3 ok",
		"launchk 1 1 5 ok", "launchk 2 1 2 ok", "graph 1 3 4 10 ok", "launchk 0 99 1 ok")
	const made = 3 + 5 + 2 + 4*10 + 1
	f, tab := r.hostLaunches(t)
	if tab.Total() != made || tab.Launches[launches.None] != 0 {
		t.Fatalf("launches %v (total %d), want %d, none unobserved", tab.Launches, tab.Total(), made)
	}
	for _, c := range []struct {
		m      launches.Measured
		reason string
		want   uint64
	}{
		{launches.Device, "ok", 4},
		{launches.Host, "sass-only", 45},
		{launches.Host, "target-too-low:sm_52<sm_70", 2},
	} {
		if got := coverageOf(tab, c.m, c.reason); got != c.want {
			t.Errorf("%s %s: %d launches, want %d (%+v)", c.m, c.reason, got, c.want, tab.Coverage)
		}
	}
	if m := readMaps(t, filepath.Join(r.probes, fmt.Sprintf("%d-0.maps", r.pid))); m.launches() != 4 {
		t.Errorf("device count %d, want the 4 device-labelled launches", m.launches())
	}
	g := rowNamed(t, tab.Kernels, "fake_i1_k3")
	if g.Launches != 40 || g.GraphLaunches != 40 || g.Blocks != 40*8 || g.BlockLast != [3]uint32{64, 1, 1} || f.GraphLaunches != 10 {
		t.Errorf("graph kernel %+v (graph launches %d), want 40 launches in 10 replays", g, f.GraphLaunches)
	}
	long := "_ZN7cutlass6KernelINS_4gemm6kernel0"
	long += strings.Repeat("E", 1456-len(long))
	var cut launches.Row
	for _, row := range tab.Kernels {
		if row.Truncated {
			cut = row
		}
	}
	if cut.NameLen != 1456 || len(cut.Name) != launches.NameSize-1 || !strings.HasPrefix(long, cut.Name) ||
		cut.KernelID != abi.KernelID(long) || cut.Measured != launches.Device || cut.Launches != 1 {
		t.Errorf("long name row %+v", cut)
	}
}

// Launch latency (launch-latency selected: launch times on): a host-measured
// launch gets an event after it; the time from the call to its completion is
// at least the kernel's (the fake's kernels take FAKECUDA_KERNEL_US). Events
// that never complete are not waited for, and no more than 64 are in flight.
func TestHostLaunchesLatency(t *testing.T) {
	sass := writeTemp(t, "sass.fatbin", fatbin(sassEntry(90)))
	tn := probeTenant(t, 44, true)
	tn.launchTimeOn()
	r := tn.runImages([]string{"FAKECUDA_KERNEL_US=3000"}, "lib", sass, "launchk", "0", "1", "5")
	f, tab := r.hostLaunches(t)
	row := rowNamed(t, tab.Kernels, "fake_i0_k1")
	if !f.Latency || row.LatCount != 5 || row.LatMinNs < 2_500_000 || row.LatMaxNs > 1_000_000_000 {
		t.Errorf("latency: flag %v, row %+v: want 5 of at least 3 ms", f.Latency, row)
	}
	var hist uint64
	for _, v := range tab.LatHist {
		hist += v
	}
	if hist != 5 || tab.LatCalibNs == 0 {
		t.Errorf("histogram holds %d, calibration %d ns", hist, tab.LatCalibNs)
	}

	// a probe set that names its kernels times only those: a kernel outside
	// the list is counted, and no event is recorded after its launches
	// (launchlate on one llama.cpp kernel had put an event after every
	// other launch of the prefill)
	listed := probeTenant(t, 46, true)
	listed.launchTimeOn()
	conf := filepath.Join(listed.dir, "probes", "module.conf")
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, append(b, "kernel some_other_kernel\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	r = listed.runImages([]string{"FAKECUDA_KERNEL_US=3000"}, "lib", sass, "launchk", "0", "1", "5")
	f, tab = r.hostLaunches(t)
	row = rowNamed(t, tab.Kernels, "fake_i0_k1")
	if !f.Latency || row.Launches != 5 || row.LatCount != 0 || tab.LatSkipped != 0 {
		t.Errorf("a kernel outside the list: flag %v, row %+v, skipped %d: want 5 launches, none timed", f.Latency, row, tab.LatSkipped)
	}
	if n := countPrefix(listed.driverCalls(r.pid), "cuEventCreate"); n > 2 {
		t.Errorf("%d events created for launches of a kernel outside the list, want at most the 2 epochs", n)
	}

	pending := probeTenant(t, 45, true)
	pending.launchTimeOn()
	r = pending.runImages([]string{"FAKECUDA_EVENT_PENDING=1"}, "lib", sass, "launchk", "0", "1", "100")
	wantLines(t, r.lines, "lib sass.fatbin ok", "launchk 0 1 100 ok")
	_, tab = r.hostLaunches(t)
	row = rowNamed(t, tab.Kernels, "fake_i0_k1")
	if row.Launches != 100 || row.LatCount != 0 || tab.LatSkipped < 100-64 {
		t.Errorf("pending events: row %+v, skipped %d", row, tab.LatSkipped)
	}
	if n := countPrefix(pending.driverCalls(r.pid), "cuEventCreate"); n > 64+2 {
		t.Errorf("%d events created, want at most 64 in flight and 2 epochs", n)
	}
}

// Without probes the interposer writes no launch table.
func TestHostLaunchesOffWithoutProbes(t *testing.T) {
	sass := writeTemp(t, "sass.fatbin", fatbin(sassEntry(90)))
	tn := probeTenant(t, 46, false)
	r := tn.runImages(nil, "lib", sass, "launchk", "0", "1", "2")
	if _, err := os.Stat(filepath.Join(r.probes, fmt.Sprintf("%d.launches", r.pid))); !os.IsNotExist(err) {
		t.Errorf("launches file without probes: %v", err)
	}
}

// cuLaunchKernelEx (its grid and block read from the CUlaunchConfig) and
// cuLaunchCooperativeKernel are launches too.
func TestHostLaunchesExAndCooperative(t *testing.T) {
	sass := writeTemp(t, "sass.fatbin", fatbin(sassEntry(90)))
	tn := probeTenant(t, 47, true)
	r := tn.runImages(nil, "lib", sass, "launchex", "0", "1", "3", "coop", "0", "2", "2")
	wantLines(t, r.lines, "lib sass.fatbin ok", "launchex 0 1 3 ok", "coop 0 2 2 ok")
	_, tab := r.hostLaunches(t)
	ex := rowNamed(t, tab.Kernels, "fake_i0_k1")
	if ex.Launches != 3 || ex.Blocks != 3*6 || ex.GridLast != [3]uint32{3, 1, 2} || ex.BlockLast != [3]uint32{32, 4, 1} ||
		ex.MaxBlocks != 6 || ex.MaxThreads != 128 {
		t.Errorf("cuLaunchKernelEx row %+v", ex)
	}
	if co := rowNamed(t, tab.Kernels, "fake_i0_k2"); co.Launches != 2 || co.Blocks != 4 || co.BlockLast != [3]uint32{64, 1, 1} {
		t.Errorf("cuLaunchCooperativeKernel row %+v", co)
	}
	if tab.Total() != 5 {
		t.Errorf("launches %v, want 5", tab.Launches)
	}
}
