package e2e

// The systemd unit of Docker and podman hosts (deploy/systemd): every OCI
// test's agent runs the unit's ExecStart (ociLab.StartAgent), with the lab's
// binary dir and config file in place of the unit's install paths.

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuext/gpuext/lib/testutil"
)

const (
	ociUnitFile       = "deploy/systemd/gpuext-agent.service"
	ociUnitDaemonJSON = "deploy/systemd/daemon.json"
	// the install paths of the unit and daemon.json, which the lab replaces
	ociUnitBinDir = "/usr/local/bin"
	ociUnitConfig = "/etc/gpuext/config.json"
)

// ociUnitExecStart is the unit's ExecStart as words. It reads only the
// systemd syntax the unit uses: one ExecStart in [Service], words split at
// blanks; anything else (quotes, specifiers, variables, prefixes,
// continuation lines) fails, naming what this reader must learn first.
func ociUnitExecStart(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), ociUnitFile))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	section := ""
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]" && strings.HasPrefix(line, "ExecStart="):
			v := strings.TrimPrefix(line, "ExecStart=")
			if j := strings.IndexAny(v, "\"'$%;\\"); j >= 0 || strings.ContainsAny(v[:1], "-@:+!") {
				t.Fatalf("%s:%d: ExecStart=%s: this test splits the command at blanks only; teach ociUnitExecStart this syntax", ociUnitFile, i+1, v)
			}
			lines = append(lines, v)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("%s: %d ExecStart lines in [Service], want 1", ociUnitFile, len(lines))
	}
	return strings.Fields(lines[0])
}

// ociUnitCommand is the unit's ExecStart run against a lab: the binary from
// binDir instead of /usr/local/bin, config instead of /etc/gpuext/config.json;
// every other word as the unit has it.
func ociUnitCommand(t *testing.T, binDir, config string) []string {
	t.Helper()
	argv := ociUnitExecStart(t)
	if filepath.Dir(argv[0]) != ociUnitBinDir {
		t.Fatalf("%s: ExecStart runs %s, want a binary of %s (what the README installs)", ociUnitFile, argv[0], ociUnitBinDir)
	}
	out := []string{filepath.Join(binDir, filepath.Base(argv[0]))}
	for _, a := range argv[1:] {
		if a == ociUnitConfig {
			a = config
		}
		out = append(out, a)
	}
	return out
}

// The unit is the agent without containerd, reading the config the Docker
// runtime entry gives the wrapper: one config, so both name one agent socket.
func TestOCISystemdUnitPairsWithDaemonJSON(t *testing.T) {
	argv := ociUnitExecStart(t)
	if filepath.Base(argv[0]) != "gpuext-nri-plugin" {
		t.Errorf("ExecStart runs %s, want the agent gpuext-nri-plugin", argv[0])
	}
	has := func(words ...string) bool {
		for i := 0; i+len(words) <= len(argv); i++ {
			if reflect.DeepEqual(argv[i:i+len(words)], words) {
				return true
			}
		}
		return false
	}
	if !has("--nri=false") {
		t.Errorf("ExecStart %v lacks --nri=false: on a host without containerd the agent would dial NRI and exit", argv)
	}
	if !has("--config", ociUnitConfig) {
		t.Errorf("ExecStart %v does not read %s", argv, ociUnitConfig)
	}
	data, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), ociUnitDaemonJSON))
	if err != nil {
		t.Fatal(err)
	}
	var daemon struct {
		Runtimes map[string]struct {
			Path        string   `json:"path"`
			RuntimeArgs []string `json:"runtimeArgs"`
		} `json:"runtimes"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&daemon); err != nil {
		t.Fatalf("%s: %v", ociUnitDaemonJSON, err)
	}
	rt, ok := daemon.Runtimes["gpuext"]
	if !ok || rt.Path != ociUnitBinDir+"/gpuext-runc" || !reflect.DeepEqual(rt.RuntimeArgs, []string{"--config", ociUnitConfig}) {
		t.Errorf("%s: runtime gpuext %+v, want %s/gpuext-runc --config %s beside the unit's agent", ociUnitDaemonJSON, rt, ociUnitBinDir, ociUnitConfig)
	}
}

// The agent every OCI test starts is the unit's command line, and the hooks
// it serves register a runc container through it.
func TestOCISystemdUnitCommandLineServesTheHooks(t *testing.T) {
	ociRequirePrivileged(t, "runc", "busybox", "go")
	l := ociNewLab(t)
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(l.agent.Process.Pid) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
	if want := ociUnitCommand(t, l.Bin, l.Config); !reflect.DeepEqual(got, want) {
		t.Fatalf("the lab's agent runs %q, want the unit's ExecStart %q", got, want)
	}
	b := ociNewBundle(t, l, "unit", map[string]string{"policy.gpuext.io": "batch"}, nil, ociScript)
	b.addHooks(t, l)
	if stderr, err := b.runDetached(t, "runc"); err != nil {
		t.Fatalf("runc run: %v\n%s", err, stderr)
	}
	b.output(t, "READY")
	ociAssertRegistered(t, l.Registry(t), b.ID, b.CgroupsPath, "batch")
	b.stop(t)
}
