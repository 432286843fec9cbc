package hook

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/cgroup"
	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/agent"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/lib/testutil"
	"github.com/gpuext/gpuext/policies"
)

// fakeRuncDir makes a PATH dir holding an executable named runc.
func fakeRuncDir(t *testing.T) (dir, runc string) {
	t.Helper()
	dir = t.TempDir()
	runc = filepath.Join(dir, "runc")
	if err := os.WriteFile(runc, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, runc
}

func TestFindRunc(t *testing.T) {
	realDir, realRunc := fakeRuncDir(t)
	selfDir := t.TempDir()
	self := filepath.Join(selfDir, "runc") // the wrapper installed as "runc"
	if err := os.WriteFile(self, []byte("wrapper"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "runc")
	if err := os.Symlink(self, link); err != nil {
		t.Fatal(err)
	}
	path := strings.Join([]string{selfDir, filepath.Dir(link), realDir}, ":")
	if got, err := FindRunc("runc", self, path); err != nil || got != realRunc {
		t.Fatalf("FindRunc = %q, %v; want %q (itself and a link to itself skipped)", got, err, realRunc)
	}
	if _, err := FindRunc("gx-no-such-runc", self, selfDir); err == nil {
		t.Fatal("not in PATH nor in the fallback dirs: no error")
	}
	if got, err := FindRunc("runc", self, selfDir); err == nil && got == self {
		t.Fatal("found itself")
	}
	if got, err := FindRunc(realRunc, self, ""); err != nil || got != realRunc {
		t.Fatalf("absolute: %q, %v", got, err)
	}
	// A configured runc that is missing or cannot run is an error before
	// admission, not when the wrapper executes it.
	notExec := filepath.Join(t.TempDir(), "runc")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/nonexistent/gx/runc", notExec, t.TempDir()} {
		if got, err := FindRunc(p, self, ""); err == nil {
			t.Errorf("FindRunc(%q) = %q, want an error", p, got)
		}
	}
	if got, err := FindRunc("runc", self, filepath.Dir(notExec)); err == nil && got == notExec {
		t.Errorf("PATH: a file without x bits found")
	}
	if _, err := FindRunc(self, self, ""); err == nil {
		t.Fatal("configured runc is the wrapper: no error")
	}
}

type wrapperFixture struct {
	dir, cfgPath, logPath, runc, bundle, hook string
	orig                                      []byte
}

func newWrapperFixture(t *testing.T, extra map[string]any) wrapperFixture {
	t.Helper()
	var f wrapperFixture
	pathDir, runc := fakeRuncDir(t)
	f.runc = runc
	t.Setenv("PATH", pathDir)
	f.dir = t.TempDir()
	f.hook = filepath.Join(f.dir, DefaultHookName)
	if err := os.WriteFile(f.hook, []byte("hook"), 0o755); err != nil {
		t.Fatal(err)
	}
	f.cfgPath, f.logPath = writeTestConfig(t, f.dir, extra)
	f.bundle = filepath.Join(f.dir, "bundle")
	if err := os.MkdirAll(f.bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(filepath.Join("..", "testdata", "docker-20.10-config.json"))
	if err != nil {
		t.Fatal(err)
	}
	f.orig = orig
	if err := os.WriteFile(filepath.Join(f.bundle, "config.json"), orig, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f wrapperFixture) run(t *testing.T, args ...string) (Exec, int, string) {
	t.Helper()
	var stderr bytes.Buffer
	ex, code := WrapperMain(WrapperEnv{Args: args, Cwd: f.bundle, Self: filepath.Join(f.dir, "gpuext-runc"),
		Getenv: os.Getenv, Stderr: &stderr})
	return ex, code, stderr.String()
}

func (f wrapperFixture) configUnchanged(t *testing.T) {
	t.Helper()
	now, _ := os.ReadFile(filepath.Join(f.bundle, "config.json"))
	if !bytes.Equal(now, f.orig) {
		t.Fatal("config.json was changed")
	}
}

func TestWrapperPassthrough(t *testing.T) {
	f := newWrapperFixture(t, nil)
	for _, args := range [][]string{
		{"--root", "/r", "state", "c1"},
		{"--root", "/r", "--log", "/l", "--log-format", "json", "start", "c1"},
		{"kill", "c1", "KILL"},
		{"delete", "--force", "c1"},
		{"features"},
		{"--version"},
		{"exec", "--process", "/p.json", "c1"},
		{"--root"}, // unparseable: runc reports it
	} {
		ex, code, stderr := f.run(t, append([]string{"--config", f.cfgPath}, args...)...)
		if code != ExitOK || stderr != "" || ex.Path != f.runc || !slices.Equal(ex.Argv[1:], args) || ex.Argv[0] != "runc" {
			t.Fatalf("%q: exec %+v, code %d, stderr %q", args, ex, code, stderr)
		}
	}
	f.configUnchanged(t)
	if data, _ := os.ReadFile(f.logPath); len(data) != 0 {
		t.Fatalf("passthrough logged: %s", data)
	}
}

// With the agent unavailable (nothing listens at agentSocket), the
// fail-open wrapper runs runc on the unchanged bundle; the strict one
// refuses and puts the reason in runc's JSON log, where Docker finds it.
func TestWrapperAdmissionFailure(t *testing.T) {
	create := func(f wrapperFixture) []string {
		return []string{"--config", f.cfgPath, "--root", "/r", "--log", filepath.Join(f.dir, "runc-log.json"),
			"--log-format", "json", "create", "--bundle", f.bundle, "--pid-file", "/p", "c1"}
	}
	t.Run("fail-open", func(t *testing.T) {
		f := newWrapperFixture(t, nil)
		args := create(f)
		ex, code, stderr := f.run(t, args...)
		if code != ExitOK || stderr != "" || !slices.Equal(ex.Argv[1:], args[2:]) {
			t.Fatalf("exec %+v, code %d, stderr %q", ex, code, stderr)
		}
		f.configUnchanged(t)
		logData, _ := os.ReadFile(f.logPath)
		if !strings.Contains(string(logData), "gpuext agent unavailable") || !strings.Contains(string(logData), `"container":"c1"`) {
			t.Fatalf("log = %s", logData)
		}
	})
	t.Run("strict", func(t *testing.T) {
		f := newWrapperFixture(t, map[string]any{"failMode": "strict"})
		_, code, stderr := f.run(t, create(f)...)
		if code != ExitFailed || !strings.HasPrefix(stderr, "gpuext: ") {
			t.Fatalf("code %d, stderr %q", code, stderr)
		}
		f.configUnchanged(t)
		runcLog, _ := os.ReadFile(filepath.Join(f.dir, "runc-log.json"))
		if !strings.Contains(string(runcLog), `"level":"error"`) || !strings.Contains(string(runcLog), "gpuext: ") {
			t.Fatalf("runc log = %s", runcLog)
		}
	})
	t.Run("bad config refuses create, passes other commands", func(t *testing.T) {
		f := newWrapperFixture(t, nil)
		if err := os.WriteFile(f.cfgPath, []byte(`{"failMod":"strict"}`), 0o644); err != nil {
			t.Fatal(err)
		}
		_, code, stderr := f.run(t, create(f)...)
		if code != ExitFailed || !strings.Contains(stderr, "failMod") {
			t.Fatalf("code %d, stderr %q", code, stderr)
		}
		f.configUnchanged(t)
		if ex, code, _ := f.run(t, "--config", f.cfgPath, "state", "c1"); code != ExitOK || ex.Path != f.runc {
			t.Fatalf("state: %+v %d", ex, code)
		}
	})
	t.Run("missing /etc/gpuext/config.json is the defaults", func(t *testing.T) {
		// daemon.json passes --config /etc/gpuext/config.json; a host
		// without the file runs on the defaults (fail-open), as the agent does
		if _, err := os.Stat(config.DefaultPath); err == nil {
			t.Skipf("this host has %s: the case needs it missing", config.DefaultPath)
		}
		f := newWrapperFixture(t, nil)
		args := append([]string{"--config", config.DefaultPath}, create(f)[2:]...)
		ex, code, stderr := f.run(t, args...)
		if code != ExitOK || strings.Contains(stderr, "config") || ex.Path != f.runc || !slices.Equal(ex.Argv[1:], args[2:]) {
			t.Fatalf("exec %+v, code %d, stderr %q; want runc run with the defaults (fail-open)", ex, code, stderr)
		}
		if _, code, stderr := f.run(t, append([]string{"--config", filepath.Join(f.dir, "typo.json")}, create(f)[2:]...)...); code != ExitFailed ||
			!strings.Contains(stderr, "typo.json") {
			t.Fatalf("a missing config named by hand: code %d, stderr %q; want a refusal naming it", code, stderr)
		}
	})
	t.Run("missing hook binary", func(t *testing.T) {
		f := newWrapperFixture(t, map[string]any{"failMode": "strict"})
		os.Remove(f.hook)
		_, code, stderr := f.run(t, create(f)...)
		if code != ExitFailed || !strings.Contains(stderr, "hook binary") {
			t.Fatalf("code %d, stderr %q", code, stderr)
		}
	})
}

func TestHookEntries(t *testing.T) {
	h := HookEntries("/opt/bin/gpuext-oci-hook", "")
	if got := h[StageCreateRuntime].Args; !slices.Equal(got, []string{"gpuext-oci-hook", "createRuntime"}) {
		t.Fatalf("args without config = %q", got)
	}
	if len(h) != 2 || h[StagePoststop].Path != "/opt/bin/gpuext-oci-hook" {
		t.Fatalf("hooks = %+v", h)
	}
}

// fakeCore is an admission core that admits every container (an empty
// decision: annotations and hooks only) and records what it was asked.
type fakeCore struct {
	mu       sync.Mutex
	admitted []admission.ContainerInfo
}

func (c *fakeCore) Admit(info admission.ContainerInfo) (admission.Decision, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.admitted = append(c.admitted, info)
	return admission.Decision{Tenant: 7, Policy: policies.Policy{Name: "default"}}, nil
}

func (c *fakeCore) RegisterOCI(admission.ContainerInfo) (admission.Decision, cgroup.Cgroup, error) {
	return admission.Decision{}, cgroup.Cgroup{}, errors.New("not in this test")
}

func (c *fakeCore) Remove(admission.ContainerInfo) error { return nil }

func (c *fakeCore) ids() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for _, i := range c.admitted {
		ids = append(ids, i.ID)
	}
	return ids
}

// agentFixture is a wrapper fixture whose agent socket serves a fakeCore,
// with a second bundle (other) as the working directory's neighbour.
type agentFixture struct {
	wrapperFixture
	core  *fakeCore
	other string
}

func newAgentFixture(t *testing.T, extra map[string]any) agentFixture {
	t.Helper()
	testutil.RequireRoot(t) // the agent answers root peers only
	sockDir, err := os.MkdirTemp("", "gx-agent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "agent.sock")
	if extra == nil {
		extra = map[string]any{}
	}
	extra["agentSocket"] = sock
	f := agentFixture{wrapperFixture: newWrapperFixture(t, extra), core: &fakeCore{}}
	srv, err := agent.Listen(sock, func() (agent.Core, error) { return f.core, nil }, logrus.NewEntry(logrus.New()))
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	t.Cleanup(func() { srv.Close() })
	f.other = filepath.Join(f.dir, "other")
	if err := os.MkdirAll(f.other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.other, "config.json"), f.orig, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// edited reports whether the wrapper injected gpuext into dir's config.json.
func edited(t *testing.T, dir string) bool {
	t.Helper()
	b, err := LoadBundle(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, ok := b.Spec.Annotations[admission.AnnotationDecision]
	return ok
}

// runIn runs the wrapper with the working directory cwd.
func (f agentFixture) runIn(t *testing.T, cwd string, args ...string) (Exec, int, string) {
	t.Helper()
	var stderr bytes.Buffer
	ex, code := WrapperMain(WrapperEnv{Args: append([]string{"--config", f.cfgPath}, args...), Cwd: cwd,
		Self: filepath.Join(f.dir, "gpuext-runc"), Getenv: os.Getenv, Stderr: &stderr})
	return ex, code, stderr.String()
}

// The wrapper edits the config.json runc will use: with --bundle after the
// container id (runc moves it before), that of --bundle, not the working
// directory's.
func TestWrapperAdmitsTheBundleRuncUses(t *testing.T) {
	for _, tc := range []struct {
		name string
		args func(f agentFixture) []string
	}{
		{"docker", func(f agentFixture) []string {
			return []string{"--root", "/run/docker/runtime-runc/moby", "--log", filepath.Join(f.dir, "log.json"), "--log-format", "json",
				"create", "--bundle", f.bundle, "--pid-file", filepath.Join(f.dir, "init.pid"), "c1"}
		}},
		{"--bundle after the id", func(f agentFixture) []string { return []string{"create", "c1", "--bundle", f.bundle} }},
		{"flags both sides of the id", func(f agentFixture) []string {
			return []string{"--root", "/r", "create", "--pid-file", "/p", "c1", "-b", f.bundle, "--no-new-keyring"}
		}},
		{"-- as --pid-file's value, --bundle after the id", func(f agentFixture) []string {
			return []string{"create", "--pid-file", "--", "c1", "--bundle", f.bundle}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newAgentFixture(t, nil)
			args := tc.args(f)
			ex, code, stderr := f.runIn(t, f.other, args...)
			if code != ExitOK || ex.Path != f.runc || !slices.Equal(ex.Argv[1:], args) {
				t.Fatalf("exec %+v, code %d, stderr %q", ex, code, stderr)
			}
			if ids := f.core.ids(); !slices.Equal(ids, []string{"c1"}) {
				t.Fatalf("admitted %q, want c1", ids)
			}
			if !edited(t, f.bundle) || edited(t, f.other) {
				t.Fatalf("bundle edited %v, working directory's edited %v: want the bundle's only", edited(t, f.bundle), edited(t, f.other))
			}
		})
	}
}

// A create that runc refuses (here: -d is run's flag, not create's) creates
// nothing: nothing is admitted, runc gets the line and reports it.
func TestWrapperPassesRefusedCreateToRunc(t *testing.T) {
	f := newAgentFixture(t, nil)
	for _, args := range [][]string{
		{"create", "-d", "--bundle", f.bundle, "c1"},
		{"create", "--bundle", f.bundle, "c1", "c2"},
		{"create", "-b", f.bundle, "--bundle", f.other, "c1"},
		{"create", "--no-pivot", "c1", "--bundle", f.bundle},
		{"", "create", "--bundle", f.bundle, "c1"}, // runc prints its help
	} {
		ex, code, stderr := f.runIn(t, f.other, args...)
		if code != ExitOK || !slices.Equal(ex.Argv[1:], args) {
			t.Fatalf("%q: exec %+v, code %d, stderr %q", args, ex, code, stderr)
		}
	}
	if ids := f.core.ids(); len(ids) != 0 || edited(t, f.bundle) || edited(t, f.other) {
		t.Fatalf("admitted %q", ids)
	}
}

// A line runc versions read differently is never admitted: strict refuses
// it naming the readings, fail-open lets runc run it on unchanged bundles.
func TestWrapperAmbiguousRuncLine(t *testing.T) {
	line := func(f agentFixture) []string { return []string{"create", "c1", "-b", "--", "--"} }
	t.Run("strict", func(t *testing.T) {
		f := newAgentFixture(t, map[string]any{"failMode": "strict"})
		_, code, stderr := f.runIn(t, f.bundle, line(f)...)
		if code != ExitFailed || !strings.Contains(stderr, ErrAmbiguousRuncArgs.Error()) || !strings.Contains(stderr, `bundle "--"`) {
			t.Fatalf("code %d, stderr %q", code, stderr)
		}
		if ids := f.core.ids(); len(ids) != 0 || edited(t, f.bundle) {
			t.Fatalf("admitted %q", ids)
		}
	})
	t.Run("fail-open", func(t *testing.T) {
		f := newAgentFixture(t, nil)
		ex, code, stderr := f.runIn(t, f.bundle, line(f)...)
		if code != ExitOK || stderr != "" || !slices.Equal(ex.Argv[1:], line(f)) {
			t.Fatalf("exec %+v, code %d, stderr %q", ex, code, stderr)
		}
		if ids := f.core.ids(); len(ids) != 0 || edited(t, f.bundle) {
			t.Fatalf("admitted %q", ids)
		}
		if log, _ := os.ReadFile(f.logPath); !strings.Contains(string(log), ErrAmbiguousRuncArgs.Error()) {
			t.Fatalf("log %s", log)
		}
	})
}

// A configured runc that is not there fails the create before admission:
// no tenant reserved, no config.json edited.
func TestWrapperChecksRuncBeforeAdmission(t *testing.T) {
	for _, mode := range []string{"fail-open", "strict"} {
		f := newAgentFixture(t, map[string]any{"failMode": mode, "runc": "/nonexistent/gx/runc"})
		_, code, stderr := f.runIn(t, f.bundle, "create", "--bundle", f.bundle, "c1")
		if code != ExitFailed || !strings.Contains(stderr, "/nonexistent/gx/runc") {
			t.Fatalf("%s: code %d, stderr %q", mode, code, stderr)
		}
		if ids := f.core.ids(); len(ids) != 0 || edited(t, f.bundle) {
			t.Fatalf("%s: admitted %q", mode, ids)
		}
	}
}
