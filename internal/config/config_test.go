package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, in, wantErr string
		check             func(Config) bool
	}{
		{name: "empty gives defaults", in: "", check: func(c Config) bool { return c == Default() }},
		{name: "override one field", in: `{"failMode":"strict"}`, check: func(c Config) bool {
			return c.FailMode == "strict" && c.PinDir == Default().PinDir
		}},
		{name: "unknown field named", in: `{"failmode":"strict"}`, wantErr: `unknown field "failmode"`},
		{name: "bad fail mode named", in: `{"failMode":"maybe"}`, wantErr: `failMode "maybe"`},
		{name: "bad log level named", in: `{"logLevel":"loud"}`, wantErr: `logLevel "loud"`},
		{name: "trailing data", in: `{} {}`, wantErr: "trailing data"},
		{name: "wrong type", in: `{"pinDir": 3}`, wantErr: "pinDir"},
		{name: "relative MPS shm dir named", in: `{"mpsShmDirectory":"shm"}`, wantErr: `mpsShmDirectory "shm"`},
		{name: "bad mpsRootTenants named", in: `{"mpsRootTenants":"sometimes"}`, wantErr: `mpsRootTenants "sometimes"`},
		{name: "bad latencyControl mode named", in: `{"latencyControl":{"mode":"auto"}}`, wantErr: `latencyControl.mode "auto"`},
		{name: "latencyControl budget over 100", in: `{"latencyControl":{"budgetPercent":140}}`, wantErr: `latencyControl.budgetPercent 140`},
		{name: "latencyControl stallAfter too short", in: `{"latencyControl":{"stallAfter":"10ms"}}`, wantErr: `latencyControl.stallAfter "10ms"`},
		{name: "latencyControl paceDepth over 16", in: `{"latencyControl":{"paceDepth":17}}`, wantErr: `latencyControl.paceDepth 17`},
		{name: "latencyControl paceDepth 0 is no bound", in: `{"latencyControl":{"paceDepth":0}}`, check: func(c Config) bool {
			return c.LatencyControlSpec().PaceDepth < 0 && c.LatencyControlSpec().On
		}},
		{name: "latencyControl paceDepth absent is the default", in: `{"latencyControl":{"budgetPercent":50}}`, check: func(c Config) bool {
			s := c.LatencyControlSpec()
			return s.PaceDepth == 0 && s.Budget == 50
		}},
		{name: "latencyControl paceDepth 4", in: `{"latencyControl":{"paceDepth":4}}`, check: func(c Config) bool {
			return c.LatencyControlSpec().PaceDepth == 4
		}},
		{name: "latencyControl paceDepth negative", in: `{"latencyControl":{"paceDepth":-1}}`, wantErr: `latencyControl.paceDepth -1`},
		{name: "mpsRootTenants deny", in: `{"mpsRootTenants":"deny"}`, check: func(c Config) bool { return c.MPSRootTenants == "deny" }},
		{name: "absolute MPS dirs", in: `{"mpsPipeDirectory":"/run/mps","mpsShmDirectory":"/run/mps-shm"}`, check: func(c Config) bool {
			return c.MPSPipeDirectory == "/run/mps" && c.MPSShmDirectory == "/run/mps-shm"
		}},
	} {
		cfg, err := Parse([]byte(tc.in), "test.json")
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "test.json") {
				t.Errorf("%s: error %v, want one naming test.json and containing %q", tc.name, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case !tc.check(cfg):
			t.Errorf("%s: got %+v", tc.name, cfg)
		}
	}
}

func TestOverlayKeepsBase(t *testing.T) {
	base := Default()
	base.LogFile = "/var/log/x.log"
	got, err := Overlay(base, []byte(`{"failMode":"strict"}`), "runtime")
	if err != nil {
		t.Fatal(err)
	}
	if got.LogFile != "/var/log/x.log" || got.FailMode != "strict" {
		t.Errorf("Overlay = %+v", got)
	}
}

// TestPathsMustBeAbsolute: a relative (or, where required, empty) path
// would resolve against whatever directory the agent, the hook or the
// runtime runs in; each is an error naming its key.
func TestPathsMustBeAbsolute(t *testing.T) {
	for _, key := range []string{"pinDir", "stateDir", "devrtDir", "agentSocket", "hostRoot", "catalogDir",
		"kernelPolicyDir", "probeDir", "constraintsFile", "logFile", "dockerDataRoot", "hookPath",
		"mpsPipeDirectory", "mpsShmDirectory"} {
		_, err := Parse([]byte(`{"`+key+`":"run/gpuext"}`), "test.json")
		if err == nil || !strings.Contains(err.Error(), key+` "run/gpuext"`) || !strings.Contains(err.Error(), "absolute") {
			t.Errorf("%s relative: %v; want an error naming the key and saying absolute", key, err)
		}
	}
	for _, key := range []string{"pinDir", "stateDir", "devrtDir", "hostRoot"} {
		if _, err := Parse([]byte(`{"`+key+`":""}`), "test.json"); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s empty: %v; want an error naming the key", key, err)
		}
	}
}

// TestErrorsQuoteBoundedValues: a 100 KB value gives an error of a line,
// not one twice its size, still naming the key and the value's start.
func TestErrorsQuoteBoundedValues(t *testing.T) {
	big := strings.Repeat("x", 100<<10)
	for _, key := range []string{"logLevel", "failMode", "reconcileInterval", "stateDir", "metricsAddress"} {
		_, err := Parse([]byte(`{"`+key+`":"`+big+`"}`), "test.json")
		if err == nil {
			t.Fatalf("%s: a 100 KB value accepted", key)
		}
		if msg := err.Error(); len(msg) > 512 || !strings.Contains(msg, key+` "xxxx`) || !strings.Contains(msg, "102400 bytes") {
			t.Errorf("%s: error of %d bytes (%.200s); want under 512, naming the key, the value's start and its length", key, len(msg), msg)
		}
	}
}

// TestLoadOrDefault: every field is optional, so the conventional path may
// be missing (the defaults, said to the caller); a file there is read; a
// missing file at a path named by hand is an error naming it.
func TestLoadOrDefault(t *testing.T) {
	dir := t.TempDir()
	def := filepath.Join(dir, "config.json")
	if cfg, usedDefaults, err := loadOrDefault(def, def); err != nil || !usedDefaults || cfg != Default() {
		t.Errorf("missing default path: %+v usedDefaults=%v err=%v, want the defaults", cfg, usedDefaults, err)
	}
	if cfg, usedDefaults, err := loadOrDefault("", def); err != nil || !usedDefaults || cfg != Default() {
		t.Errorf("no path: %+v usedDefaults=%v err=%v, want the defaults", cfg, usedDefaults, err)
	}
	other := filepath.Join(dir, "typo.json")
	if _, _, err := loadOrDefault(other, def); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), other) {
		t.Errorf("missing named path: %v, want ErrNotExist naming %s", err, other)
	}
	if err := os.WriteFile(def, []byte(`{"failMode":"strict"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if cfg, usedDefaults, err := loadOrDefault(def, def); err != nil || usedDefaults || cfg.FailMode != "strict" {
		t.Errorf("default path present: failMode %q usedDefaults=%v err=%v, want the file's strict", cfg.FailMode, usedDefaults, err)
	}
	for _, unit := range []string{"gpuext-agent.service", "gpuext-nri.service"} { // the units name the default path
		b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "systemd", unit))
		if err != nil || !strings.Contains(string(b), "--config "+DefaultPath) {
			t.Errorf("deploy/systemd/%s: %v; want its ExecStart to pass --config %s", unit, err, DefaultPath)
		}
	}
}
