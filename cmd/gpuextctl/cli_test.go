package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/bpf/bpftest"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/agent"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/lib/testutil"
)

// TestMain lets a test run this test binary as gpuextctl itself
// (GPUEXTCTL_RUN_MAIN=1): what a user sees on stdout and stderr, and the
// exit status.
func TestMain(m *testing.M) {
	if os.Getenv("GPUEXTCTL_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// ctl runs gpuextctl with args as a user would, without GPUEXT_CONFIG.
func ctl(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = []string{"GPUEXTCTL_RUN_MAIN=1", "PATH=" + os.Getenv("PATH")}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run gpuextctl %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

// TestMistakesPrintOneLine: an unknown command or a bad flag (global or a
// command's) is one line on stderr naming it, with where to look, and exit
// status 1: no usage dump, no message printed twice.
func TestMistakesPrintOneLine(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		want, hint string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`, "gpuextctl --help lists the commands"},
		{[]string{"--bogus", "tenants"}, "flag provided but not defined: -bogus", "gpuextctl --help"},
		{[]string{"tenants", "--bogus"}, "flag provided but not defined: -bogus", "gpuextctl tenants --help lists its flags"},
		{[]string{"policies", "-o", "yaml"}, `-o "yaml": want wide or json`, ""},
		{[]string{"tenants", "--json", "-o", "wide"}, "--json and -o wide: pick one", ""},
	} {
		stdout, stderr, code := ctl(t, tc.args...)
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		if code != 1 || stdout != "" || len(lines) != 1 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, tc.hint) {
			t.Errorf("gpuextctl %s: exit %d, stdout %q, stderr (%d lines):\n%s\nwant exit 1 and one line with %q and %q",
				strings.Join(tc.args, " "), code, stdout, len(lines), stderr, tc.want, tc.hint)
		}
		if strings.Count(stderr, tc.want) != 1 {
			t.Errorf("gpuextctl %s says %q %d times:\n%s", strings.Join(tc.args, " "), tc.want, strings.Count(stderr, tc.want), stderr)
		}
	}
}

// TestCommandHelp: a command's --help lists its subcommands and all its
// flags on stdout, and exits 0.
func TestCommandHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"policies", "--help"}, []string{"gpuextctl policies [-o wide|json]", "gpuextctl policies show NAME",
			"gpuextctl policies attached", "gpuextctl policies attach NAME", "gpuextctl policies detach NAME", "-o string", "-json"}},
		{[]string{"tenants", "-h"}, []string{"gpuextctl tenants [-o wide|json]", "gpuextctl tenants set-policy", "MEM-PEAK",
			"-pin-dir string"}},
		{[]string{"ping", "--help"}, []string{"gpuextctl ping", "-socket string", "-timeout duration"}},
	} {
		stdout, stderr, code := ctl(t, tc.args...)
		if code != 0 || stderr != "" {
			t.Errorf("gpuextctl %s: exit %d, stderr %q; want 0 and nothing on stderr", strings.Join(tc.args, " "), code, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stdout, w) {
				t.Errorf("gpuextctl %s lacks %q:\n%s", strings.Join(tc.args, " "), w, stdout)
			}
		}
		if strings.Contains(stdout, "gpuextctl probes") {
			t.Errorf("gpuextctl %s lists other commands:\n%s", strings.Join(tc.args, " "), stdout)
		}
	}
}

// TestMissingConfig: a --config that does not exist leaves the commands
// that only read on the defaults (the built-in catalog), with a warning
// naming the file; a command that changes the node refuses it.
func TestMissingConfig(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "config.json")
	stdout, stderr, code := ctl(t, "--config", missing, "policies")
	if code != 0 || !strings.Contains(stdout, "latency-critical") || !strings.Contains(stderr, missing) ||
		!strings.Contains(stderr, "using the defaults") {
		t.Errorf("gpuextctl --config MISSING policies: exit %d\nstdout:\n%s\nstderr:\n%s\nwant the built-in catalog and a warning naming %s",
			code, stdout, stderr, missing)
	}
	for _, args := range [][]string{{"gc"}, {"policies", "detach", "fifo"}, {"tenants", "set-policy", "7", "batch"}} {
		err := run(append([]string{"--config", missing}, args...), io.Discard)
		if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
			t.Errorf("gpuextctl --config MISSING %s: %v, want an error naming %s", strings.Join(args, " "), err, missing)
		}
	}
}

// TestPoliciesNarrowAndWide: the default table fits a terminal and names
// every policy's class and algorithms; -o wide has the summary and the
// description; -o json is the catalog.
func TestPoliciesNarrowAndWide(t *testing.T) {
	var narrow, wide, js bytes.Buffer
	for _, c := range []struct {
		args []string
		out  *bytes.Buffer
	}{{[]string{"policies"}, &narrow}, {[]string{"policies", "-o", "wide"}, &wide}, {[]string{"policies", "-o", "json"}, &js}} {
		if err := run(c.args, c.out); err != nil {
			t.Fatalf("gpuextctl %v: %v", c.args, err)
		}
	}
	lines := strings.Split(strings.TrimSpace(narrow.String()), "\n")
	if len(lines) < 6 || !strings.HasPrefix(lines[0], "POLICY") {
		t.Fatalf("policies: want a header and the five built-in policies:\n%s", narrow.String())
	}
	for _, l := range lines {
		if len(l) > 100 {
			t.Errorf("policies: a %d-column line (want at most 100; -o wide for more):\n%s", len(l), l)
		}
	}
	for _, w := range []string{"latency-critical  latency-critical", "from quota.gpuext.io", "tenant-quota", "lfu"} {
		if !strings.Contains(narrow.String(), w) {
			t.Errorf("policies lacks %q:\n%s", w, narrow.String())
		}
	}
	for _, w := range []string{"DESCRIPTION", "evict=priority-weighted(weight=8)", "Inference and interactive serving"} {
		if !strings.Contains(wide.String(), w) {
			t.Errorf("policies -o wide lacks %q:\n%s", w, wide.String())
		}
	}
	var list []struct{ Name string }
	if err := json.Unmarshal(js.Bytes(), &list); err != nil || len(list) != len(lines)-1 {
		t.Errorf("policies -o json: %v, %d policies, want the table's %d:\n%s", err, len(list), len(lines)-1, js.String())
	}
}

// TestPingNoAgent: with no agent, ping names the socket and what to do,
// not the API route it happens to ask.
func TestPingNoAgent(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	err := run([]string{"ping", "--socket", sock}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), sock) || !strings.Contains(err.Error(), "start it (gpuext-nri-plugin") ||
		strings.Contains(err.Error(), "/v1/") {
		t.Errorf("ping without an agent: %v, want the socket and how to start the agent, no API route", err)
	}
}

// TestSetPolicyUnknownTenant: a real agent (its API server over an
// admission core on a pinned registry) asked to change a tenant it does
// not have answers not-found; gpuextctl says so as the user's mistake and
// how to find the tenants, not as gpuext's internal failure.
func TestSetPolicyUnknownTenant(t *testing.T) {
	pin := bpftest.PinDir(t)
	state := t.TempDir()
	testutil.UnmountUnder(t, state)
	cfg := config.Default()
	cfg.PinDir, cfg.StateDir, cfg.DevrtDir = pin, state, t.TempDir()
	lg := logrus.New()
	lg.SetOutput(io.Discard)
	core, reg, err := admission.Open(cfg, logrus.NewEntry(lg))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	dir, err := os.MkdirTemp("", "gpuextctl-agent") // t.TempDir paths can exceed the socket path limit
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "sock", "agent.sock")
	srv, err := agent.Listen(sock, func() (agent.Core, error) { return core, nil }, logrus.NewEntry(lg))
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer srv.Close()
	if err := run([]string{"ping", "--socket", sock}, io.Discard); err != nil {
		t.Fatalf("ping the test agent: %v", err)
	}
	err = run([]string{"tenants", "set-policy", "--socket", sock, "12345", "batch"}, io.Discard)
	if !errors.Is(err, admission.ErrUnknownTenant) || !strings.Contains(err.Error(), `"12345"`) ||
		!strings.Contains(err.Error(), "`gpuextctl tenants` lists the tenants") || strings.Contains(err.Error(), "internal") {
		t.Errorf("set-policy of a tenant that is not there: %v\nwant not-found naming 12345 and gpuextctl tenants, not internal", err)
	}
}

// TestGCAndBoardAskTheAgent: gc with no agent names the socket and how to
// start the agent (it builds no core of its own); board refuses to be a
// second publisher and names --standalone; a bad --grace is named.
func TestGCAndBoardAskTheAgent(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	var out bytes.Buffer
	err := run([]string{"gc", "--socket", sock}, &out)
	if err == nil || !strings.Contains(err.Error(), sock) || !strings.Contains(err.Error(), "start it (gpuext-nri-plugin") ||
		strings.Contains(out.String(), "dropped") {
		t.Errorf("gc without an agent: %v (stdout %q), want the socket and how to start the agent, nothing dropped", err, out.String())
	}
	if err := run([]string{"gc", "--socket", sock, "--grace", "-1m"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--grace -1m0s") {
		t.Errorf("gc --grace -1m: %v, want an error naming --grace", err)
	}
	err = run([]string{"board"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--standalone") || !strings.Contains(err.Error(), "agent publishes") {
		t.Errorf("board: %v, want a refusal saying the agent publishes it and naming --standalone", err)
	}
}
