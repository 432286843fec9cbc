package devrt

// A probe's hostWrites (map elements the interposer writes for the
// programs, what bpftime's host side writes) through the interposer,
// against the fake libcuda.

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/gpubpf/abi"
	"github.com/gpuext/gpuext/gpubpf/compile"
	"github.com/gpuext/gpuext/gpubpf/programs"
	"github.com/gpuext/gpuext/lib/testutil"
)

// Our launchlate-shaped launch-gap, from a probe directory: at bind the
// interposer writes lg_clock[0], the device clock's offset from the host's
// CLOCK_MONOTONIC (the fake device runs an hour behind CLOCK_REALTIME, so
// it is CLOCK_REALTIME - CLOCK_MONOTONIC - 1 h within the measured
// error), once; before each of the 3 launches it writes lg_host[0] on the
// launch's stream with the launch's time, the value __gpuext_launch_ns
// gets; the status file says so, and the maps file holds both.
func TestProbesHostWrites(t *testing.T) {
	const skew = -3_600_000_000_000
	cat, err := programs.BuiltinWithDir(testutil.BpftimeDir(t, "", "launch-gap"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := compile.NewCompiler(cat, nil).Compile([]string{"launch-gap"})
	if err != nil {
		t.Fatal(err)
	}
	tn := probeTenant(t, 44, false)
	if err := b.WriteDir(filepath.Join(tn.dir, "probes")); err != nil {
		t.Fatal(err)
	}
	realMinusMono := func() int64 {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
			t.Fatal(err)
		}
		return time.Now().UnixNano() - ts.Nano()
	}
	before := realMinusMono()
	r := tn.runImages([]string{fmt.Sprintf("FAKECUDA_GLOBALTIMER_OFFSET_NS=%d", skew)}, "mod", filepath.Join("testdata", "ptx", "grid.ptx"), "launch", "3")
	after := realMinusMono()

	sym, clockSym := "__gpuext_map_lg_host", "__gpuext_map_lg_clock"
	var launchNs, hostNs []uint64
	var offsets []int64
	for _, c := range tn.driverCalls(r.pid) {
		var v uint64
		switch {
		case strings.Contains(c, " cuStreamWriteValue64_v2 dst="+abi.SymLaunchNs+" "):
			fmt.Sscanf(c[strings.Index(c, "value="):], "value=%d", &v)
			launchNs = append(launchNs, v)
		case strings.Contains(c, " cuStreamWriteValue64_v2 dst="+sym+" "):
			fmt.Sscanf(c[strings.Index(c, "value="):], "value=%d", &v)
			hostNs = append(hostNs, v)
		case strings.Contains(c, " cuMemcpyHtoDAsync_v2 dst="+clockSym+" bytes=8 "):
			fmt.Sscanf(c[strings.Index(c, "value="):], "value=%d", &v)
			offsets = append(offsets, int64(v))
		}
	}
	if len(launchNs) != 3 || fmt.Sprint(hostNs) != fmt.Sprint(launchNs) {
		t.Errorf("launch times into lg_host[0] %v, want those of __gpuext_launch_ns %v (3 launches)", hostNs, launchNs)
	}
	var clockErr int64 = -1
	var hw []map[string]string
	for _, s := range r.status(t) {
		if s["clock"] == "synced" && s["why"] == "bind" {
			clockErr, _ = strconv.ParseInt(s["error_ns"], 10, 64)
		}
		if s["host_write"] != "" {
			hw = append(hw, s)
		}
	}
	if len(offsets) != 1 || clockErr < 0 {
		t.Fatalf("clock offset written %d times (%v), clock error %d; want once, after a synced clock", len(offsets), offsets, clockErr)
	}
	// the offset: skew (within the clock's error) + CLOCK_REALTIME - CLOCK_MONOTONIC (which NTP may slew a little in the run)
	if lo, hi := skew+min(before, after)-clockErr-1_000_000, skew+max(before, after)+clockErr+1_000_000; offsets[0] < lo || offsets[0] > hi {
		t.Errorf("clock offset %d not in [%d, %d]", offsets[0], lo, hi)
	}
	if len(hw) != 2 || hw[0]["host_write"] != "launch-time" || hw[0]["state"] != "on" || hw[0]["offset"] != "40" ||
		hw[1]["host_write"] != "clock-offset" || hw[1]["state"] != "on" || hw[1]["value_ns"] != strconv.FormatInt(offsets[0], 10) || hw[1]["clock"] != "synced" {
		t.Errorf("status host_write lines %v", hw)
	}
	m := readMaps(t, filepath.Join(r.probes, fmt.Sprintf("%d-0.maps", r.pid)))
	host, clock := m.maps["lg_host"], m.maps["lg_clock"]
	if len(host) < 48 || len(clock) < 48 || len(launchNs) == 0 ||
		binary.LittleEndian.Uint64(host[40:]) != launchNs[len(launchNs)-1] || int64(binary.LittleEndian.Uint64(clock[40:])) != offsets[0] {
		t.Errorf("lg_host, lg_clock copied out % x, % x: want the last launch time and the offset", host, clock)
	}
}

// module.conf's host_write lines: well-formed ones (and one naming a value
// of a newer host, not written) leave the image patched; a bad offset, a
// line short of its fields or more than GX_CONF_MAX_HOST_WRITES make the
// file invalid, naming the line.
func TestPTXPatchHostWriteLines(t *testing.T) {
	const head = "version 1\nmin_ptx 7.8\nmin_target 70\nlaunch_time 1\nmap counts __gpuext_map_counts 80\n"
	nine := strings.Repeat("host_write launch-time __gpuext_map_counts 40\n", 9)
	for _, tc := range []struct{ name, lines, want string }{
		{"both values", "host_write launch-time __gpuext_map_counts 40\nhost_write clock-offset __gpuext_map_counts 56\n", ""},
		{"a newer host's value", "host_write launch-count __gpuext_map_counts 40\n", ""},
		{"offset not 8-aligned", "host_write launch-time __gpuext_map_counts 44\n", "unpatched module.conf:6:bad-host-write-offset"},
		{"offset not a number", "host_write launch-time __gpuext_map_counts 4O\n", "unpatched module.conf:6:bad-host-write-offset"},
		{"offset past 2 GiB", "host_write clock-offset __gpuext_map_counts 2147483656\n", "unpatched module.conf:6:bad-host-write-offset"},
		{"no offset", "host_write launch-time __gpuext_map_counts\n", "unpatched module.conf:6:wrong-argument-count"},
		{"nine", nine, "unpatched module.conf:14:too-many-host-writes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			confFile := filepath.Join(t.TempDir(), "module.conf")
			if err := os.WriteFile(confFile, []byte(head+tc.lines), 0o644); err != nil {
				t.Fatal(err)
			}
			got := patchFile(t, confFile, filepath.Join("testdata", "ptx", "fragment.ptx"), filepath.Join("testdata", "ptx", "multi.ptx"))
			if tc.want == "" {
				if !strings.Contains(got, "__gpuext_probe_entry") {
					t.Errorf("not patched: %.200q", got)
				}
				return
			}
			if strings.TrimSpace(got) != tc.want {
				t.Errorf("got %.200q, want %q", got, tc.want)
			}
		})
	}
}
