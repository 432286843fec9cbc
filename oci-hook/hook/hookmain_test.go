package hook

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeTestConfig writes a gpuext config whose logFile is in dir; extra
// fields are merged in.
func writeTestConfig(t *testing.T, dir string, extra map[string]any) (cfgPath, logPath string) {
	t.Helper()
	logPath = filepath.Join(dir, "gpuext.log")
	// The pin dir lies under a regular file: no registry can open there
	// (a directory on another filesystem would get a bpffs mounted on it).
	if err := os.WriteFile(filepath.Join(dir, "not-a-dir"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"logFile": logPath, "pinDir": filepath.Join(dir, "not-a-dir", "pins"),
		"agentSocket": filepath.Join(dir, "no-agent", "agent.sock"),
		"stateDir":    filepath.Join(dir, "state"), "devrtDir": filepath.Join(dir, "devrt")}
	for k, v := range extra {
		cfg[k] = v
	}
	data, _ := json.Marshal(cfg)
	cfgPath = filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfgPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return cfgPath, logPath
}

func TestHookMainRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	cfgPath, logPath := writeTestConfig(t, dir, nil)
	bundle := filepath.Join(dir, "bundle")
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		stdin    string
		wantCode int
		wantErr  string // on stderr and in the log
	}{
		{name: "no stage", args: nil, wantCode: ExitBadArgs, wantErr: "want exactly one stage argument"},
		{name: "unknown stage", args: []string{"poststart"}, stdin: `{}`, wantCode: ExitBadArgs, wantErr: "unknown hook stage"},
		{name: "empty stdin", args: []string{"createRuntime"}, wantCode: ExitBadArgs, wantErr: "stdin is empty"},
		{name: "bad JSON", args: []string{"createRuntime"}, stdin: `{"id":`, wantCode: ExitBadArgs, wantErr: "bad OCI state"},
		{name: "missing id", args: []string{"createRuntime"}, stdin: `{"pid":1,"bundle":"/b"}`, wantCode: ExitBadArgs, wantErr: "missing id"},
		{name: "missing pid", args: []string{"prestart"}, stdin: `{"id":"c1","bundle":"/b"}`, wantCode: ExitBadArgs, wantErr: "missing pid"},
		{name: "missing bundle", args: []string{"poststop"}, stdin: `{"id":"c1"}`, wantCode: ExitBadArgs, wantErr: "missing bundle"},
		{name: "bundle without config.json", args: []string{"createRuntime"},
			stdin: `{"id":"c1","pid":1,"bundle":"` + bundle + `"}`, wantCode: ExitBadArgs, wantErr: "config.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			args := append([]string{"--config", cfgPath}, tt.args...)
			code := HookMain(args, strings.NewReader(tt.stdin), &stderr, time.Second)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d (stderr %q)", code, tt.wantCode, stderr.String())
			}
			msg := stderr.String()
			if strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "gpuext-oci-hook: ") || !strings.Contains(msg, tt.wantErr) {
				t.Fatalf("stderr = %q, want one line with %q", msg, tt.wantErr)
			}
			logData, _ := os.ReadFile(logPath)
			last := lastLine(string(logData))
			if !strings.Contains(last, tt.wantErr) || !strings.Contains(last, `"level":"error"`) {
				t.Fatalf("last log line = %q, want an error naming %q", last, tt.wantErr)
			}
		})
	}
}

func TestHookMainStdinNeverCloses(t *testing.T) {
	dir := t.TempDir()
	cfgPath, _ := writeTestConfig(t, dir, nil)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	var stderr bytes.Buffer
	start := time.Now()
	code := HookMain([]string{"--config", cfgPath, "createRuntime"}, r, &stderr, 200*time.Millisecond)
	if code != ExitBadArgs || !strings.Contains(stderr.String(), "timed out") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	if time.Since(start) > 3*time.Second {
		t.Fatalf("took %s", time.Since(start))
	}
}

func TestHookMainConfig(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"failMode":"sometimes"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	code := HookMain([]string{"--config", bad, "poststop"}, strings.NewReader(`{}`), &stderr, time.Second)
	if code != ExitFailed || !strings.Contains(stderr.String(), "failMode") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	// GPUEXT_CONFIG is the fallback.
	t.Setenv(EnvConfig, bad)
	stderr.Reset()
	code = HookMain([]string{"poststop"}, strings.NewReader(`{}`), &stderr, time.Second)
	if code != ExitFailed || !strings.Contains(stderr.String(), "failMode") {
		t.Fatalf("env config: exit %d, stderr %q", code, stderr.String())
	}
}

// An admission failure (here: the registry cannot be opened) fails the
// container only in strict mode; poststop never fails the teardown.
func TestHookMainFailMode(t *testing.T) {
	for _, tt := range []struct {
		mode, stage string
		wantCode    int
	}{
		{"fail-open", "createRuntime", ExitOK},
		{"strict", "createRuntime", ExitFailed},
		{"strict", "poststop", ExitOK},
	} {
		t.Run(tt.mode+"/"+tt.stage, func(t *testing.T) {
			dir := t.TempDir()
			cfgPath, logPath := writeTestConfig(t, dir, map[string]any{"failMode": tt.mode})
			bundle := filepath.Join(dir, "bundle")
			os.MkdirAll(bundle, 0o755)                                                                  //nolint:errcheck
			os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{"ociVersion":"1.0.2"}`), 0o644) //nolint:errcheck
			var stderr bytes.Buffer
			state := `{"id":"c1","pid":1,"bundle":"` + bundle + `"}`
			code := HookMain([]string{"--config", cfgPath, tt.stage}, strings.NewReader(state), &stderr, time.Second)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d (stderr %q)", code, tt.wantCode, stderr.String())
			}
			if (code != ExitOK) != (stderr.Len() > 0) {
				t.Fatalf("stderr = %q", stderr.String())
			}
			logData, _ := os.ReadFile(logPath)
			if !strings.Contains(string(logData), "gpuext agent unavailable") {
				t.Fatalf("log = %s", logData)
			}
		})
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
