package hook

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
	if got, err := FindRunc("/usr/bin/my-runc", self, ""); err != nil || got != "/usr/bin/my-runc" {
		t.Fatalf("absolute: %q, %v", got, err)
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
