package devrt

// Tests of the device runtime library against the fake libcuda (the CI
// machine has no GPU; `make gpu-test` runs the same kinds of checks with real
// CUDA on the H200). Everything is built once with devrt/build.sh; the
// assertions are on what a user would notice: the test apps' result lines,
// the calls that reached the fake driver (its call log) and the tenant's
// usage file as usage_dump prints it. No root needed.

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/devrt/tenantcfg"
	"github.com/gpuext/gpuext/lib/testutil"
)

const gib = 1 << 30

// tenant is one tenant as injection sets it up: a tenant dir with the files
// admission writes there (settings.bin, which the interposer reads, and
// config.json), a writable accounting directory, and the fake driver's call
// log.
type tenant struct {
	t       *testing.T
	bin     string
	dir     string
	file    tenantcfg.File // what write puts in the tenant dir
	acct    string
	fakeLog string
	preload string
	extra   []string
}

// newTenant writes the tenant dir of a policy with this quota and class
// (and timesliceUs 2000) with admission's own writer; tune changes the
// tenant file before it is written.
func newTenant(t *testing.T, id int, quota uint64, class string, tune ...func(*tenantcfg.File)) *tenant {
	t.Helper()
	bin := testutil.BuildDevrt(t)
	dir := t.TempDir()
	tn := &tenant{t: t, bin: bin, dir: dir, acct: filepath.Join(dir, "acct"),
		fakeLog: filepath.Join(dir, "fake.log"), preload: filepath.Join(bin, "libgpuext-devrt.so"),
		file: tenantcfg.File{ABIVersion: 1, TenantID: uint32(id), TenantKey: fmt.Sprintf("test/%d", id), Policy: "quota",
			Class: class, QuotaBytes: quota, TimesliceUS: 2000, Probes: []string{}, ProbeKernels: []string{}}}
	if err := os.Mkdir(tn.acct, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tn.acct, 0o1777); err != nil {
		t.Fatal(err)
	}
	for _, f := range tune {
		f(&tn.file)
	}
	tn.write()
	return tn
}

// write (re)writes the tenant dir from tn.file as admission does (temp file + rename).
func (tn *tenant) write() {
	tn.t.Helper()
	if err := tenantcfg.WriteFiles(tn.dir, tn.file); err != nil {
		tn.t.Fatal(err)
	}
}

func (tn *tenant) settings() string { return filepath.Join(tn.dir, tenantcfg.FileName) }

// env is the injection's env (docs/injection.md) with the test's paths.
func (tn *tenant) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "LD_PRELOAD=") || strings.HasPrefix(kv, "LD_LIBRARY_PATH=") ||
			strings.HasPrefix(kv, "GPUEXT_") || strings.HasPrefix(kv, "FAKECUDA_") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "LD_LIBRARY_PATH="+filepath.Join(tn.bin, "fake"), "FAKECUDA_LOG="+tn.fakeLog,
		tenantcfg.EnvTenantDir+"="+tn.dir, tenantcfg.EnvTenantConfig+"="+filepath.Join(tn.dir, tenantcfg.ConfigFileName),
		tenantcfg.EnvTenantAcct+"="+tn.acct, tenantcfg.EnvTenantID+"=1", tenantcfg.EnvDevrtDebug+"=1")
	if tn.preload != "" {
		env = append(env, "LD_PRELOAD="+tn.preload)
	}
	return append(env, tn.extra...)
}

func (tn *tenant) cmd(app string, steps ...string) *exec.Cmd {
	c := exec.Command(filepath.Join(tn.bin, "fake", app), steps...)
	c.Env = tn.env()
	return c
}

// run runs an app to the end and returns its result lines and stderr.
func (tn *tenant) run(app string, steps ...string) ([]string, string) {
	tn.t.Helper()
	c := tn.cmd(app, steps...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		tn.t.Fatalf("%s %v: %v\nstdout:\n%s\nstderr:\n%s", app, steps, err, stdout.String(), stderr.String())
	}
	return strings.Split(strings.TrimSpace(stdout.String()), "\n"), stderr.String()
}

// holder is an app that ran its steps and now holds its allocations until killed.
type holder struct {
	cmd   *exec.Cmd
	lines []string
}

func (tn *tenant) hold(app string, steps ...string) *holder {
	tn.t.Helper()
	c := tn.cmd(app, append(steps, "hold")...)
	out, err := c.StdoutPipe()
	if err != nil {
		tn.t.Fatal(err)
	}
	var stderr bytes.Buffer
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		tn.t.Fatal(err)
	}
	h := &holder{cmd: c}
	tn.t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, out)
	}()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				tn.t.Fatalf("%s %v exited before hold: %v\nstderr:\n%s", app, steps, h.lines, stderr.String())
			}
			if l == "hold" {
				return h
			}
			h.lines = append(h.lines, l)
		case <-timeout:
			tn.t.Fatalf("%s %v: no hold line after 20s: %v", app, steps, h.lines)
		}
	}
}

func (h *holder) kill9(t *testing.T) {
	t.Helper()
	if err := h.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = h.cmd.Wait()
}

// usage is the tenant's usage file as usage_dump prints it.
type usage struct {
	header map[string]string
	slots  []map[string]string
}

func (tn *tenant) usage() usage {
	tn.t.Helper()
	out, err := exec.Command(filepath.Join(tn.bin, "usage_dump"), filepath.Join(tn.acct, "usage")).CombinedOutput()
	if err != nil {
		tn.t.Fatalf("usage_dump: %v\n%s", err, out)
	}
	var u usage
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		kv := map[string]string{}
		for _, p := range f[1:] {
			k, v, _ := strings.Cut(p, "=")
			kv[k] = v
		}
		switch f[0] {
		case "header":
			u.header = kv
		case "slot":
			u.slots = append(u.slots, kv)
		}
	}
	if u.header["magic"] != "ok" {
		tn.t.Fatalf("usage file header: %s", out)
	}
	return u
}

func (u usage) num(t *testing.T, key string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(u.header[key], 10, 64)
	if err != nil {
		t.Fatalf("usage header %s=%q: %v", key, u.header[key], err)
	}
	return n
}

func (u usage) slotOf(pid int) map[string]string {
	for _, s := range u.slots {
		if s["pid"] == strconv.Itoa(pid) {
			return s
		}
	}
	return nil
}

// driverCalls returns the fake driver's log lines, optionally only a pid's.
func (tn *tenant) driverCalls(pid int) []string {
	tn.t.Helper()
	data, err := os.ReadFile(tn.fakeLog)
	if err != nil && !os.IsNotExist(err) {
		tn.t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if l != "" && (pid == 0 || strings.HasPrefix(l, fmt.Sprintf("pid=%d ", pid))) {
			out = append(out, l)
		}
	}
	return out
}

func countPrefix(lines []string, sub string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

func wantLines(t *testing.T, got []string, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d lines %q, want %q", len(got), got, want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Fatalf("line %d: got %q, want prefix %q\nall: %q", i, got[i], want[i], got)
		}
	}
}

// Three processes of one tenant share a 4GiB quota; the refused allocation
// never reaches the driver; a kill -9'd holder's memory returns to the tenant.
func TestQuotaAcrossProcessesAndKill9(t *testing.T) {
	for _, app := range []string{"app_procaddr", "app_linked"} {
		t.Run(app, func(t *testing.T) {
			tn := newTenant(t, 3, 4*gib, "standard")
			p1 := tn.hold(app, "alloc", "2GiB")
			wantLines(t, p1.lines, "alloc 2147483648 ok")
			p2 := tn.hold(app, "alloc", "1GiB")
			wantLines(t, p2.lines, "alloc 1073741824 ok")

			p3 := tn.cmd(app, "alloc", "2GiB", "info", "alloc", "1GiB")
			var out, errb bytes.Buffer
			p3.Stdout, p3.Stderr = &out, &errb
			if err := p3.Run(); err != nil {
				t.Fatalf("p3: %v\n%s", err, errb.String())
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			wantLines(t, lines, "alloc 2147483648 CUDA_ERROR_OUT_OF_MEMORY",
				fmt.Sprintf("info free=%d total=%d", 1*gib, 4*gib), "alloc 1073741824 ok")
			p3calls := tn.driverCalls(p3.Process.Pid)
			if n := countPrefix(p3calls, "cuMemAlloc_v2 size=2147483648"); n != 0 {
				t.Fatalf("the refused allocation reached the driver: %q", p3calls)
			}
			if n := countPrefix(p3calls, "cuMemAlloc_v2 size=1073741824"); n != 1 {
				t.Fatalf("the allowed allocation did not reach the driver once: %q", p3calls)
			}
			u := tn.usage()
			if u.num(t, "used") != 3*gib || u.num(t, "refused") != 1 || u.num(t, "quota") != 4*gib || u.num(t, "tenant") != 3 {
				t.Fatalf("usage header after p3: %v", u.header)
			}
			if s := u.slotOf(p1.cmd.Process.Pid); s == nil || s["live"] != "1" || s["bytes"] != "2147483648" {
				t.Fatalf("p1's slot: %v (all %v)", s, u.slots)
			}

			// Full: p4 is refused until p1 is killed.
			lines, _ = tn.run(app, "alloc", "2GiB")
			wantLines(t, lines, "alloc 2147483648 CUDA_ERROR_OUT_OF_MEMORY")
			p1pid := p1.cmd.Process.Pid
			p1.kill9(t)
			lines, _ = tn.run(app, "alloc", "2GiB", "info")
			wantLines(t, lines, "alloc 2147483648 ok", fmt.Sprintf("info free=%d total=%d", 1*gib, 4*gib))
			u = tn.usage()
			if s := u.slotOf(p1pid); s != nil {
				t.Fatalf("the killed process's slot was not reclaimed: %v", s)
			}
			if u.num(t, "used") != 1*gib || u.num(t, "peak") != 4*gib || u.num(t, "refused") != 2 {
				t.Fatalf("usage header after kill -9: %v", u.header)
			}
			_ = p2
		})
	}
}

// cuMemGetInfo reports the quota as total and quota - tenant usage as free;
// without a quota it passes the device's numbers through.
func TestMemGetInfo(t *testing.T) {
	tn := newTenant(t, 4, 4*gib, "standard")
	lines, _ := tn.run("app_linked", "info", "alloc", "1GiB", "info", "infov1", "nvml")
	wantLines(t, lines, fmt.Sprintf("info free=%d total=%d", 4*gib, 4*gib), "alloc 1073741824 ok",
		fmt.Sprintf("info free=%d total=%d", 3*gib, 4*gib),
		fmt.Sprintf("infov1 free=%d total=%d", 3*gib, uint64(4*gib-1)), // v1 is 32-bit: clamped
		fmt.Sprintf("nvml free=%d total=%d used=%d", 3*gib, 4*gib, 1*gib))

	// Never more free than the device really has.
	small := newTenant(t, 5, 4*gib, "standard")
	small.extra = []string{fmt.Sprintf("FAKECUDA_TOTAL_BYTES=%d", 2*gib)}
	lines, _ = small.run("app_procaddr", "info")
	wantLines(t, lines, fmt.Sprintf("info free=%d total=%d", 2*gib, 4*gib))

	none := newTenant(t, 6, 0, "standard")
	lines, _ = none.run("app_procaddr", "info", "alloc", "70GiB", "alloc", "20GiB", "info", "nvml")
	wantLines(t, lines, fmt.Sprintf("info free=%d total=%d", 80*gib, 80*gib), "alloc 75161927680 ok",
		"alloc 21474836480 CUDA_ERROR_OUT_OF_MEMORY", // the fake driver's own answer
		fmt.Sprintf("info free=%d total=%d", 10*gib, 80*gib), fmt.Sprintf("nvml free=%d total=%d", 80*gib, 80*gib))
	if n := countPrefix(none.driverCalls(0), "cuMemAlloc_v2 size=21474836480 rc=2"); n != 1 {
		t.Fatalf("without a quota the allocation must reach the driver: %q", none.driverCalls(0))
	}
}

// Every allocating entry point and its free are accounted with the right size.
func TestAccountingPerEntryPoint(t *testing.T) {
	for _, app := range []string{"app_procaddr", "app_linked"} {
		t.Run(app, func(t *testing.T) {
			tn := newTenant(t, 7, 4*gib, "standard")
			info := func(free uint64) string { return fmt.Sprintf("info free=%d total=%d", free, 4*gib) }
			lines, _ := tn.run(app,
				"create", "1GiB", "info", "free", "0", "info", // 0: cuMemCreate / cuMemRelease
				"asyncptsz", "1GiB", "pool", "1GiB", "info", // 1, 2
				"free", "1", "free", "2", "info",
				"async", "1GiB", "managed", "1GiB", "info", // 3, 4
				"free", "3", "free", "4", "info",
				"pitch", "1000", "1000", "info", "free", "5", "info", // pitch 1024 * 1000 rows
				"create", "3GiB", "managed", "2GiB", "async", "2GiB", "pool", "2GiB", "pitch", "1048576", "2048")
			wantLines(t, lines,
				"create 1073741824 ok", info(3*gib), "free 0 ok", info(4*gib),
				"asyncptsz 1073741824 ok", "pool 1073741824 ok", info(2*gib),
				"free 1 ok", "free 2 ok", info(4*gib),
				"async 1073741824 ok", "managed 1073741824 ok", info(2*gib),
				"free 3 ok", "free 4 ok", info(4*gib),
				"pitch 1000 1000 ok pitch=1024", info(4*gib-1024*1000), "free 5 ok", info(4*gib),
				"create 3221225472 ok", "managed 2147483648 CUDA_ERROR_OUT_OF_MEMORY",
				"async 2147483648 CUDA_ERROR_OUT_OF_MEMORY", "pool 2147483648 CUDA_ERROR_OUT_OF_MEMORY",
				"pitch 1048576 2048 CUDA_ERROR_OUT_OF_MEMORY")
			calls := tn.driverCalls(0)
			for _, c := range []string{"cuMemCreate size=1073741824", "cuMemRelease", "cuMemAllocAsync_ptsz size=1073741824",
				"cuMemAllocFromPoolAsync size=1073741824", "cuMemFreeAsync_ptsz", "cuMemFreeAsync ", "cuMemAllocManaged size=1073741824",
				"cuMemAllocPitch_v2 width=1000", "cuMemFree_v2"} {
				if countPrefix(calls, c) == 0 {
					t.Errorf("driver never saw %q: %q", c, calls)
				}
			}
			for _, c := range []string{"size=2147483648", "width=1048576"} {
				if countPrefix(calls, c) != 0 {
					t.Errorf("a refused allocation (%s) reached the driver: %q", c, calls)
				}
			}
		})
	}
}

// cuGetProcAddress hands out the wrapper of the exact variant asked for, and
// that wrapper calls the driver's function of the same variant.
func TestPerVariantLookup(t *testing.T) {
	tn := newTenant(t, 8, 0, "standard")
	lines, stderr := tn.run("app_procaddr", "launch", "2", "launchptsz", "3", "load")
	wantLines(t, lines, "launch 2 ok", "launchptsz 3 ok", "load ok")
	calls := tn.driverCalls(0)
	if n, m := countPrefix(calls, "cuLaunchKernel f="), countPrefix(calls, "cuLaunchKernel_ptsz f="); n != 2 || m != 3 {
		t.Fatalf("driver saw %d cuLaunchKernel and %d cuLaunchKernel_ptsz, want 2 and 3: %q", n, m, calls)
	}
	if countPrefix(calls, " cuLibraryLoadData code=") != 1 || countPrefix(calls, " cuModuleLoadData image=") != 1 {
		t.Fatalf("image loads did not pass through: %q", calls)
	}
	for _, want := range []string{
		"dlsym cuGetProcAddress_v2: wrapped",
		"lookup cuGetProcAddress version=12000 flags=0 -> cuGetProcAddress_v2",
		"lookup cuMemAlloc version=12000 flags=0 -> cuMemAlloc_v2",
		"lookup cuLaunchKernel version=12000 flags=0 -> cuLaunchKernel",
		"lookup cuLaunchKernel version=12000 flags=2 -> cuLaunchKernel_ptsz",
		"lookup cuMemAllocAsync version=12000 flags=2 -> cuMemAllocAsync_ptsz",
		"lookup cuMemGetInfo version=12000 flags=0 -> cuMemGetInfo_v2",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("debug log lacks %q:\n%s", want, stderr)
		}
	}
	if u := tn.usage(); u.num(t, "launches") != 5 {
		t.Fatalf("launches counted: %v", u.header)
	}
}

// An LD_PRELOAD library the container already had still works before ours:
// its dlsym(RTLD_NEXT) reaches our wrapper (the quota still holds) and its
// other RTLD_NEXT lookups still find libc.
func TestExistingPreloadChain(t *testing.T) {
	tn := newTenant(t, 9, 4*gib, "standard")
	tn.preload = filepath.Join(tn.bin, "fake", "libchain.so") + ":" + filepath.Join(tn.bin, "libgpuext-devrt.so")
	lines, stderr := tn.run("app_linked", "alloc", "3GiB", "alloc", "2GiB", "info")
	wantLines(t, lines, "alloc 3221225472 ok", "alloc 2147483648 CUDA_ERROR_OUT_OF_MEMORY",
		fmt.Sprintf("info free=%d total=%d", 1*gib, 4*gib))
	for _, want := range []string{"chain next-getpid libc", "chain cuMemAlloc_v2 size=3221225472", "chain cuMemAlloc_v2 size=2147483648"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if n := countPrefix(tn.driverCalls(0), "size=2147483648"); n != 0 {
		t.Fatalf("the refused allocation reached the driver through the chain")
	}
}

// Without an accounting directory the quota still holds, per process.
func TestProcessLocalWithoutAcctDir(t *testing.T) {
	tn := newTenant(t, 10, 4*gib, "standard")
	tn.extra = []string{"GPUEXT_TENANT_ACCT="}
	lines, _ := tn.run("app_procaddr", "alloc", "3GiB", "alloc", "2GiB")
	wantLines(t, lines, "alloc 3221225472 ok", "alloc 2147483648 CUDA_ERROR_OUT_OF_MEMORY")
}

// GPUEXT_DEVRT_TRACE keeps the placeholder's contract: one line per process.
func TestTraceLine(t *testing.T) {
	tn := newTenant(t, 11, 0, "standard")
	trace := filepath.Join(tn.dir, "trace")
	tn.extra = []string{"GPUEXT_DEVRT_TRACE=" + trace, "GPUEXT_TENANT_ID=11"}
	c := tn.cmd("app_procaddr", "info")
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	data, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("pid=%d tenant=11 settings=%s\n", c.Process.Pid, tn.settings())
	if !strings.HasSuffix(string(data), want) {
		t.Fatalf("trace %q, want a line ending %q", data, want)
	}
}

// The library carries no install path: everything comes from the env.
func TestNoHardCodedPaths(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(testutil.BuildDevrt(t), "libgpuext-devrt.so"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/run/gpuext", "/opt/gpuext", "/usr/lib", "/usr/local"} {
		if bytes.Contains(data, []byte(p)) {
			t.Errorf("library contains %q", p)
		}
	}
}

// Latency-critical launches go first: while the board says latency-critical
// work is pending, a best-effort tenant's launch waits (bounded, counted in
// its own usage file) when its policy has launchGate; a latency-critical
// tenant's launch never waits.
func TestPriorityBoard(t *testing.T) {
	// A long window so that the best-effort app surely launches inside it
	// (the window is activeWindowUs, never the driver timeslice).
	lc := newTenant(t, 12, 0, "latency-critical", func(f *tenantcfg.File) { f.ActiveWindowUS = 400000 })
	be := newTenant(t, 13, 0, "best-effort", func(f *tenantcfg.File) { f.LaunchGate = true })
	board := filepath.Join(t.TempDir(), "board")
	dump := filepath.Join(lc.bin, "usage_dump")
	publish := func(usageFiles ...string) {
		t.Helper()
		if out, err := exec.Command(dump, append([]string{"publish", board}, usageFiles...)...).CombinedOutput(); err != nil {
			t.Fatalf("publish: %v\n%s", err, out)
		}
	}
	publish() // nothing pending
	for _, tn := range []*tenant{lc, be} {
		tn.extra = []string{"GPUEXT_BOARD=" + board, "FAKECUDA_KERNEL_US=100"}
	}
	launchUS := func(line string) int {
		t.Helper()
		f := strings.Fields(line)
		us, err := strconv.Atoi(strings.TrimPrefix(f[len(f)-1], "us="))
		if err != nil || !strings.HasPrefix(line, "launch") {
			t.Fatalf("launch line %q", line)
		}
		return us
	}

	lines, _ := be.run("app_procaddr", "launch", "3")
	if us := launchUS(lines[0]); us > 30000 {
		t.Fatalf("best-effort launch waited %dus with nothing pending", us)
	}
	if d := be.usage().num(t, "delayed"); d != 0 {
		t.Fatalf("delayed=%d with nothing pending", d)
	}

	lines, _ = lc.run("app_procaddr", "launch", "1")
	launchUS(lines[0])
	publish(filepath.Join(lc.acct, "usage"), filepath.Join(be.acct, "usage"))

	lines, stderr := be.run("app_procaddr", "launch", "2", "launchptsz", "1")
	if us := launchUS(lines[0]); us < 40000 {
		t.Fatalf("best-effort launches took %dus while latency-critical work was pending, want >= 2 x ~50ms\n%s", us, stderr)
	}
	if !strings.Contains(stderr, "launch delayed") {
		t.Errorf("no debug line for the delay:\n%s", stderr)
	}
	bu := be.usage()
	if bu.num(t, "delayed") != 3 || bu.num(t, "delayed_ns") < 3*40000000 {
		t.Fatalf("best-effort usage after the delay: %v", bu.header)
	}

	lines, _ = lc.run("app_procaddr", "launch", "3")
	if us := launchUS(lines[0]); us > 30000 {
		t.Fatalf("latency-critical launch waited %dus", us)
	}
	if lu := lc.usage(); lu.num(t, "delayed") != 0 || lu.num(t, "lc_active_until_ns") == 0 || lu.header["class"] != "0" {
		t.Fatalf("latency-critical usage: %v", lu.header)
	}
}

// Processes racing for the last of the quota never take more than the quota
// together; the tenant can still fill it exactly afterwards.
func TestQuotaRace(t *testing.T) {
	tn := newTenant(t, 14, 4*gib, "standard")
	const n = 12
	type result struct {
		pid int
		ok  bool
		err error
	}
	results := make(chan result, n)
	var cmds []*exec.Cmd
	for i := 0; i < n; i++ {
		c := tn.cmd("app_procaddr", "alloc", "1GiB", "hold")
		out, err := c.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		go func() {
			line, err := bufio.NewReader(out).ReadString('\n')
			results <- result{c.Process.Pid, strings.HasPrefix(line, "alloc 1073741824 ok"), err}
		}()
	}
	okPids := map[int]bool{}
	for i := 0; i < n; i++ {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.ok {
			okPids[r.pid] = true
		}
	}
	if len(okPids) > 4 || len(okPids) == 0 {
		t.Fatalf("%d of %d racing 1GiB allocations succeeded under a 4GiB quota", len(okPids), n)
	}
	if used := tn.usage().num(t, "used"); used != uint64(len(okPids))*gib {
		t.Fatalf("used=%d with %d holders", used, len(okPids))
	}
	// the refused ones leave (they hold nothing); the tenant fills up to the quota exactly
	for _, c := range cmds {
		if !okPids[c.Process.Pid] {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	free := 4 - len(okPids)
	lines, _ := tn.run("app_procaddr", "alloc", strconv.Itoa(free)+"GiB", "alloc", "1", "info")
	wantLines(t, lines, fmt.Sprintf("alloc %d ok", uint64(free)*gib), "alloc 1 CUDA_ERROR_OUT_OF_MEMORY",
		fmt.Sprintf("info free=0 total=%d", 4*gib))
}

// The library exports exactly the entry points of hooks.def and dlsym:
// nothing else of it can interpose on the application.
func TestExportsExactlyTheHookTable(t *testing.T) {
	def, err := os.ReadFile("lib/hooks.def")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"dlsym": true}
	for _, line := range strings.Split(string(def), "\n") {
		if rest, ok := strings.CutPrefix(line, "HOOK("); ok {
			sym, _, _ := strings.Cut(rest, ",")
			want[sym] = true
		}
	}
	if len(want) < 25 {
		t.Fatalf("parsed only %d hooks from hooks.def", len(want))
	}
	f, err := elf.Open(filepath.Join(testutil.BuildDevrt(t), "libgpuext-devrt.so"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_BIND(s.Info) != elf.STB_LOCAL && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			got[s.Name] = true
		}
	}
	for s := range want {
		if !got[s] {
			t.Errorf("hook %s is not exported", s)
		}
	}
	for s := range got {
		if !want[s] {
			t.Errorf("%s is exported but not in hooks.def", s)
		}
	}
}

// startReading starts c (killed at the test's end) and reads its first n
// stdout lines; the scanner reads on.
func startReading(t *testing.T, c *exec.Cmd, n int) (*bufio.Scanner, []string) {
	t.Helper()
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	sc := bufio.NewScanner(out)
	var lines []string
	for len(lines) < n && sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return sc, lines
}

// A quota the host changes (settings.bin replaced by rename, as admission
// writes it) applies to running processes within about a second.
func TestQuotaFollowsSettings(t *testing.T) {
	tn := newTenant(t, 15, 4*gib, "standard")
	c := tn.cmd("app_procaddr", "alloc", "3GiB", "alloc", "2GiB", "sleep", "1500", "alloc", "2GiB", "info")
	sc, lines := startReading(t, c, 2)
	wantLines(t, lines, "alloc 3221225472 ok", "alloc 2147483648 CUDA_ERROR_OUT_OF_MEMORY")
	tn.file.QuotaBytes = 8 * gib
	tn.write()
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	wantLines(t, lines, "alloc 3221225472 ok", "alloc 2147483648 CUDA_ERROR_OUT_OF_MEMORY", "sleep 1500",
		"alloc 2147483648 ok", fmt.Sprintf("info free=%d total=%d", 3*gib, 8*gib))
	if q := tn.usage().num(t, "quota"); q != 8*gib {
		t.Fatalf("usage header quota=%d after the change", q)
	}
}

// Containers of one pod share the tenant's usage file but not a pid
// namespace: a process whose pid means nothing here still counts while it
// lives, and its memory returns when it is killed. Needs root (unshare).
func TestQuotaAcrossPidNamespaces(t *testing.T) {
	testutil.RequireRoot(t)
	tn := newTenant(t, 16, 3*gib, "standard")
	c := exec.Command("unshare", "--pid", "--fork", "--kill-child", filepath.Join(tn.bin, "fake", "app_procaddr"), "alloc", "2GiB", "hold")
	c.Env = tn.env()
	_, lines := startReading(t, c, 2)
	wantLines(t, lines, "alloc 2147483648 ok", "hold")
	u := tn.usage()
	if len(u.slots) != 1 || u.slots[0]["pid"] != "1" || u.slots[0]["live"] != "1" {
		t.Fatalf("the other namespace's holder should be pid 1 there and live: %v", u.slots)
	}
	lines, _ = tn.run("app_procaddr", "alloc", "2GiB")
	wantLines(t, lines, "alloc 2147483648 CUDA_ERROR_OUT_OF_MEMORY")
	_ = c.Process.Kill() // unshare dies; --kill-child SIGKILLs the holder
	_ = c.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		lines, _ = tn.run("app_procaddr", "alloc", "2GiB")
		if lines[0] == "alloc 2147483648 ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("memory of the killed holder never returned: %q", lines)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The interposer runs with what admission wrote for the tenant: its id,
// quota, class and latency-critical window (the policy's activeWindowUs,
// else the default, never its timesliceUs: resolved in Go, taken as it is
// in C), as its start-up line and the tenant's usage file show. config.json
// beside settings.bin is not read.
func TestInterposerSeesWhatAdmissionWrote(t *testing.T) {
	for _, tc := range []struct {
		name   string
		id     int
		quota  uint64
		class  string
		tune   func(*tenantcfg.File)
		want   string // the start-up line's settings
		wantUA string // the usage header's class
	}{
		// classes as the kernel ABI numbers them (kmod/include/gpuext_prio.h): latency-critical 0, standard 1, best-effort 2
		{"latency-critical window", 31, 5 * gib, "latency-critical", func(f *tenantcfg.File) { f.ActiveWindowUS = 7000 },
			"tenant=31 quota=5368709120 class=0 window_ns=7000000 ", "0"},
		// the driver timeslice is not the window (issue 14): the default is
		{"timeslice is not the window", 32, 0, "best-effort", func(f *tenantcfg.File) { f.TimesliceUS = 16000; f.SMPercent = 40 },
			fmt.Sprintf("tenant=32 quota=0 class=2 window_ns=%d ", tenantcfg.DefaultActiveWindow.Nanoseconds()), "2"},
		{"default window", 33, 2 * gib, "standard", func(f *tenantcfg.File) { f.TimesliceUS = 0 },
			fmt.Sprintf("tenant=33 quota=%d class=1 window_ns=%d ", 2*gib, tenantcfg.DefaultActiveWindow.Nanoseconds()), "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn := newTenant(t, tc.id, tc.quota, tc.class, tc.tune)
			// What people read, made to disagree: the interposer must not care.
			js := fmt.Sprintf(`{"tenantId": 99, "priorityClass": "latency-critical", "quotaBytes": %d, "activeWindowUs": 1}`, 1*gib)
			if err := os.WriteFile(filepath.Join(tn.dir, tenantcfg.ConfigFileName), []byte(js), 0o644); err != nil {
				t.Fatal(err)
			}
			lines, stderr := tn.run("app_procaddr", "info")
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("start-up line lacks %q:\n%s", tc.want, stderr)
			}
			total := uint64(80 * gib) // the fake device
			if tc.quota > 0 {
				total = tc.quota
			}
			wantLines(t, lines, fmt.Sprintf("info free=%d total=%d", total, total))
			u := tn.usage()
			if u.num(t, "tenant") != uint64(tc.id) || u.num(t, "quota") != tc.quota || u.header["class"] != tc.wantUA {
				t.Errorf("usage header %v, want tenant %d quota %d class %s", u.header, tc.id, tc.quota, tc.wantUA)
			}
		})
	}
}

// A version 2 settings file (written before the classes took the kernel
// ABI's numbers) still runs its tenant in the class it named: the
// interposer translates standard 0, latency-critical 1, best-effort 2 to
// today's numbers, as tenantcfg.Decode does. The version 2 layout is frozen:
// version at byte 8, priority_class at byte 40.
func TestVersion2SettingsKeepTheirClass(t *testing.T) {
	for _, tc := range []struct {
		name string
		v2   uint32 // the class number a version 2 file held
		want tenantcfg.Class
	}{
		{"standard", 0, tenantcfg.ClassStandard},
		{"latency-critical", 1, tenantcfg.ClassLatencyCritical},
		{"best-effort", 2, tenantcfg.ClassBestEffort},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn := newTenant(t, 35, 3*gib, "standard")
			b, err := os.ReadFile(tn.settings())
			if err != nil {
				t.Fatal(err)
			}
			binary.LittleEndian.PutUint32(b[8:], 2)
			binary.LittleEndian.PutUint32(b[40:], tc.v2)
			if s, err := tenantcfg.Decode(b); err != nil || s.Class != tc.want {
				t.Fatalf("tenantcfg.Decode of the version 2 file: class %d, %v; want %d", s.Class, err, tc.want)
			}
			if err := os.WriteFile(tn.settings(), b, 0o644); err != nil {
				t.Fatal(err)
			}
			_, stderr := tn.run("app_procaddr", "info")
			want := fmt.Sprintf("tenant=35 quota=%d class=%d ", 3*gib, tc.want)
			if !strings.Contains(stderr, want) {
				t.Errorf("start-up line lacks %q:\n%s", want, stderr)
			}
			if u := tn.usage(); u.header["class"] != fmt.Sprint(tc.want) {
				t.Errorf("usage header class %q, want %d", u.header["class"], tc.want)
			}
		})
	}
}

// A settings file the interposer cannot take (cut short, too long, not a
// settings file at all, a directory) leaves the process running with the
// process-local defaults (no quota, standard, the default window, the id
// from GPUEXT_TENANT_ID) and a log line naming the file; a missing one
// too, with a debug line. A running process whose file is replaced by a
// bad one keeps the quota it had.
func TestBadSettingsFileRunsWithDefaults(t *testing.T) {
	good, err := tenantcfg.Encode(tenantcfg.Settings{TenantID: 34, QuotaBytes: 4 * gib, ActiveWindow: time.Second,
		Class: tenantcfg.ClassLatencyCritical})
	if err != nil {
		t.Fatal(err)
	}
	notMagic := append([]byte(nil), good...)
	notMagic[0] ^= 0xff // the record starts with its magic
	// standard is 1 (kmod/include/gpuext_prio.h), not the zero of a struct
	defaults := fmt.Sprintf("tenant=34 quota=0 class=1 window_ns=%d ", tenantcfg.DefaultActiveWindow.Nanoseconds())
	for _, tc := range []struct {
		name   string
		data   []byte // nil: a directory
		remove bool
		logged string
	}{
		{name: "missing", remove: true, logged: "No such file or directory (no quota, standard priority)"},
		{name: "empty", data: []byte{}, logged: fmt.Sprintf("0 bytes, want %d: ignored (no quota, standard priority)", tenantcfg.Size)},
		{name: "truncated", data: good[:40], logged: fmt.Sprintf("40 bytes, want %d: ignored", tenantcfg.Size)},
		{name: "too long", data: append(append([]byte(nil), good...), 0), logged: fmt.Sprintf("%d bytes, want %d: ignored", tenantcfg.Size+1, tenantcfg.Size)},
		{name: "not magic", data: notMagic, logged: "not a settings file"},
		{name: "config.json", data: []byte(`{"tenantId": 34, "priorityClass": "latency-critical", "quotaBytes": 4294967296, "timesliceUs": 2000, "probes": []}` + "\n"),
			logged: "ignored (no quota, standard priority)"},
		{name: "directory", logged: "not a regular file: ignored"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn := newTenant(t, 34, 4*gib, "latency-critical")
			path := tn.settings()
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.remove:
			case tc.data == nil:
				if err := os.Mkdir(path, 0o755); err != nil {
					t.Fatal(err)
				}
			default:
				if err := os.WriteFile(path, tc.data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			tn.extra = []string{tenantcfg.EnvTenantID + "=34"}
			lines, stderr := tn.run("app_procaddr", "alloc", "6GiB", "info", "launch", "1")
			// no quota: the 6GiB allocation and the device's own size
			wantLines(t, lines, "alloc 6442450944 ok", fmt.Sprintf("info free=%d total=%d", 74*gib, 80*gib), "launch 1 ok")
			if !strings.Contains(stderr, "settings "+path+": ") || !strings.Contains(stderr, tc.logged) {
				t.Errorf("no line naming %s and %q:\n%s", path, tc.logged, stderr)
			}
			if !strings.Contains(stderr, defaults) {
				t.Errorf("start-up line lacks the defaults %q:\n%s", defaults, stderr)
			}
			if u := tn.usage(); u.num(t, "tenant") != 34 || u.num(t, "quota") != 0 || u.header["class"] != "1" || u.num(t, "lc_active_until_ns") != 0 {
				t.Errorf("usage header with %s settings: %v", tc.name, u.header)
			}
		})
	}

	t.Run("replaced while running", func(t *testing.T) {
		tn := newTenant(t, 35, 4*gib, "standard")
		c := tn.cmd("app_procaddr", "alloc", "3GiB", "alloc", "2GiB", "sleep", "1500", "alloc", "2GiB", "info")
		var stderr bytes.Buffer
		c.Stderr = &stderr
		sc, lines := startReading(t, c, 2)
		wantLines(t, lines, "alloc 3221225472 ok", "alloc 2147483648 CUDA_ERROR_OUT_OF_MEMORY")
		tmp := tn.settings() + ".tmp"
		if err := os.WriteFile(tmp, good[:32], 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, tn.settings()); err != nil {
			t.Fatal(err)
		}
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		_ = c.Wait()
		wantLines(t, lines, "alloc 3221225472 ok", "alloc 2147483648 CUDA_ERROR_OUT_OF_MEMORY", "sleep 1500",
			"alloc 2147483648 CUDA_ERROR_OUT_OF_MEMORY", fmt.Sprintf("info free=%d total=%d", 1*gib, 4*gib))
		if !strings.Contains(stderr.String(), fmt.Sprintf("32 bytes, want %d: ignored", tenantcfg.Size)) {
			t.Errorf("no line for the bad replacement:\n%s", stderr.String())
		}
	})
}
