package hook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuext/gpuext/lib/testutil"
)

// runcLine is one runc command line and what runc makes of it.
type runcLine struct {
	name string
	args []string
	// For a line that creates: the container id and the bundle.
	id, bundle string
	// refused: runc runs no command (usage error, help, version); other:
	// a command that creates nothing, passed through; ambiguous: runc
	// versions read it differently.
	refused, other, ambiguous bool
	// config: the wrapper's --config value; runcArgs: what runc gets
	// (default: args).
	config   string
	runcArgs []string
	// runc's --root, --log and --log-format
	root, log, logFormat string
}

const testCwd = "/cwd"

func fields(s string) []string { return strings.Fields(s) }

// runcLines are command lines as docker, containerd's shim, podman (conmon)
// and CRI-O send them, and the odd ones runc accepts or refuses.
var runcLines = []runcLine{
	// Docker 20.10+ (containerd's runc shim, go-runc), with a terminal
	{name: "docker", args: fields("--root /run/docker/runtime-runc/moby --log /run/containerd/io.containerd.runtime.v2.task/moby/c1/log.json --log-format json --systemd-cgroup create --bundle /run/containerd/io.containerd.runtime.v2.task/moby/c1 --pid-file /run/containerd/io.containerd.runtime.v2.task/moby/c1/init.pid --console-socket /tmp/pty1/pty.sock c1"),
		id: "c1", bundle: "/run/containerd/io.containerd.runtime.v2.task/moby/c1",
		root: "/run/docker/runtime-runc/moby", log: "/run/containerd/io.containerd.runtime.v2.task/moby/c1/log.json", logFormat: "json"},
	// Docker on a ramdisk (DOCKER_RAMDISK): --no-pivot
	{name: "docker no-pivot", args: fields("--root /run/docker/runtime-runc/moby --log /x/log.json --log-format json create --bundle /x/c2 --pid-file /x/init.pid --no-pivot c2"),
		id: "c2", bundle: "/x/c2", root: "/run/docker/runtime-runc/moby", log: "/x/log.json", logFormat: "json"},
	// containerd (Kubernetes), cgroupfs and systemd
	{name: "containerd k8s", args: fields("--root /run/containerd/runc/k8s.io --log /run/containerd/io.containerd.runtime.v2.task/k8s.io/0a1b/log.json --log-format json create --bundle /run/containerd/io.containerd.runtime.v2.task/k8s.io/0a1b --pid-file /run/containerd/io.containerd.runtime.v2.task/k8s.io/0a1b/init.pid 0a1b"),
		id: "0a1b", bundle: "/run/containerd/io.containerd.runtime.v2.task/k8s.io/0a1b",
		root: "/run/containerd/runc/k8s.io", log: "/run/containerd/io.containerd.runtime.v2.task/k8s.io/0a1b/log.json", logFormat: "json"},
	{name: "containerd systemd, extra files", args: fields("--root /run/containerd/runc/k8s.io --log /l.json --log-format json --systemd-cgroup create --bundle /b/0a1c --pid-file /b/0a1c/init.pid --preserve-fds 2 0a1c"),
		id: "0a1c", bundle: "/b/0a1c", root: "/run/containerd/runc/k8s.io", log: "/l.json", logFormat: "json"},
	// podman (conmon): --no-new-keyring before the id
	{name: "podman", args: fields("--root /run/runc --systemd-cgroup create --bundle /var/lib/containers/storage/overlay-containers/9f3e/userdata --pid-file /run/containers/storage/overlay-containers/9f3e/userdata/pidfile --no-new-keyring 9f3e"),
		id: "9f3e", bundle: "/var/lib/containers/storage/overlay-containers/9f3e/userdata", root: "/run/runc"},
	{name: "podman with a terminal", args: fields("--root /run/user/1000/runc --systemd-cgroup create --bundle /u/9f3f --pid-file /u/9f3f/pidfile --no-new-keyring --console-socket /u/9f3f/console.sock 9f3f"),
		id: "9f3f", bundle: "/u/9f3f", root: "/run/user/1000/runc"},
	// CRI-O (conmon): --root=, --log-format=
	{name: "cri-o", args: fields("--systemd-cgroup --root=/run/runc --log-format=json create --bundle /run/containers/storage/overlay-containers/7d/userdata --pid-file /run/containers/storage/overlay-containers/7d/userdata/pidfile 7d"),
		id: "7d", bundle: "/run/containers/storage/overlay-containers/7d/userdata", root: "/run/runc", logFormat: "json"},
	// the wrapper's own flag, removed before runc runs
	{name: "docker with the wrapper's --config", args: fields("--config /etc/gpuext/c.json --root /r --log /l --log-format json create --bundle /x/b --pid-file /x/p c1"),
		id: "c1", bundle: "/x/b", config: "/etc/gpuext/c.json", runcArgs: fields("--root /r --log /l --log-format json create --bundle /x/b --pid-file /x/p c1"),
		root: "/r", log: "/l", logFormat: "json"},
	{name: "--gpuext-config= among globals", args: fields("--debug --gpuext-config=/c.json create c1"), id: "c1", bundle: testCwd,
		config: "/c.json", runcArgs: fields("--debug create c1")},
	{name: "--config's value is taken whatever it is", args: fields("-config --root create --bundle /b c1"), id: "c1", bundle: "/b",
		config: "--root", runcArgs: fields("create --bundle /b c1")},
	{name: "--config after other globals, other command", args: fields("--root /r --config /c.json state c1"), other: true,
		config: "/c.json", runcArgs: fields("--root /r state c1"), root: "/r"},

	// flags after the container id: runc (urfave/cli) moves them before it
	{name: "--bundle after the id", args: fields("create c1 --bundle /b"), id: "c1", bundle: "/b"},
	{name: "flags both sides", args: fields("--root /r create --pid-file /p c1 --bundle=/b --console-socket /s"), id: "c1", bundle: "/b", root: "/r"},
	{name: "run -d after the id", args: fields("run c2 -d -b /b"), id: "c2", bundle: "/b"},
	{name: "bool flag before the id", args: fields("create --bundle /b --no-pivot c3"), id: "c3", bundle: "/b"},
	{name: "bool flags, preserve-fds", args: fields("create --no-pivot --no-new-keyring --preserve-fds 2 --bundle /b c7"), id: "c7", bundle: "/b"},
	{name: "--bundle twice: the last", args: fields("create --bundle /b1 c1 --bundle /b2"), id: "c1", bundle: "/b2"},
	{name: "--bundle=, -b, -b=", args: fields("create --bundle=/abs/b/ c4"), id: "c4", bundle: "/abs/b"},
	{name: "-b relative", args: fields("create -b ../b c5"), id: "c5", bundle: "/b"},
	{name: "-b=", args: fields("create -b=sub c5"), id: "c5", bundle: "/cwd/sub"},
	{name: "no bundle: the working directory", args: fields("create --pid-file /p c6"), id: "c6", bundle: testCwd},
	{name: "empty bundle: the working directory", args: []string{"create", "--bundle", "", "c6"}, id: "c6", bundle: testCwd},
	{name: "single-dash globals", args: fields("-root /r -log /l -log-format=text create --bundle=/b c3"), id: "c3", bundle: "/b",
		root: "/r", log: "/l", logFormat: "text"},
	{name: "global bools with values", args: fields("--debug=true --systemd-cgroup=false --rootless false create -b /b c2"), id: "c2", bundle: "/b"},
	{name: "empty global value", args: []string{"--root", "", "create", "--bundle", "/b", "c2"}, id: "c2", bundle: "/b"},
	{name: "-- before the command", args: fields("--root /r -- create --bundle /b c8"), id: "c8", bundle: "/b", root: "/r"},
	{name: "-- before the id", args: fields("create --bundle /b -- c8"), id: "c8", bundle: "/b"},
	{name: "run detached", args: fields("run -d --bundle /b --pid-file /p c9"), id: "c9", bundle: "/b"},
	{name: "run --detach --keep", args: fields("--root /r run --detach --keep -b /b c10"), id: "c10", bundle: "/b", root: "/r"},
	{name: "help=false is no help", args: fields("--help=false create -h=false --bundle /b c11"), id: "c11", bundle: "/b"},
	{name: "runc 1.2+: --pidfd-socket", args: fields("create --bundle /b --pidfd-socket /p.sock c12"), id: "c12", bundle: "/b"},
	{name: "runc <= 1.3: --criu", args: fields("--criu /usr/sbin/criu create --bundle /b c13"), id: "c13", bundle: "/b"},
	{name: "runc 1.1: a comma in the id", args: fields("create --bundle /b a,b"), id: "a,b", bundle: "/b"},
	// -b moves to the front and takes the argument that follows it there
	{name: "-b last takes the first argument", args: fields("create /b c1 -b"), id: "c1", bundle: "/b"},
	// "--" as a value: only urfave/cli 1.22.6+ moves --bundle after it
	{name: "-- as --pid-file's value", args: fields("create --pid-file -- c14 --bundle /b"), id: "c14", bundle: "/b"},

	// runc versions read these differently: no config.json is sure to be runc's
	{name: "-- as --bundle's value", args: fields("create c1 -b -- --"), ambiguous: true},
	{name: "the id after a moved --pid-file", args: fields("create c1 --bundle=/b3 --pid-file -- --no-pivot"), ambiguous: true},
	{name: "a value that starts with -", args: fields("create --bundle -x /b1 c1 --pid-file"), ambiguous: true},

	// refused by every runc: it creates nothing and reports the error
	{name: "create without id", args: fields("create --bundle /b"), refused: true},
	{name: "two ids", args: fields("create --bundle /b c1 c2"), refused: true},
	{name: "create flag without value", args: fields("create c1 --bundle"), refused: true},
	{name: "a flag create does not have", args: fields("create -d --bundle /b c1"), refused: true},
	{name: "a global flag after the command", args: fields("create --root /r --bundle /b c1"), refused: true},
	{name: "-b and --bundle", args: fields("create -b /b1 --bundle /b2 c1"), refused: true},
	{name: "bad flag syntax", args: fields("create ---bundle /b c1"), refused: true},
	{name: "bad boolean", args: fields("create --no-pivot=maybe --bundle /b c1"), refused: true},
	{name: "bad preserve-fds", args: fields("create --preserve-fds two --bundle /b c1"), refused: true},
	{name: "the id after --pid-file's value", args: fields("create --pid-file --bundle /b c1"), refused: true},
	{name: "flags after -- are ids", args: fields("create -- c1 --bundle /b"), refused: true},
	{name: "a bool flag takes the id as its 'value'", args: fields("create --no-pivot c1 --bundle /b"), refused: true},
	{name: "empty id", args: []string{"create", "--bundle", "/b", ""}, refused: true},
	{name: "invalid id", args: fields("create --bundle /b ../../etc"), refused: true},
	{name: "id ..", args: fields("create --bundle /b .."), refused: true},
	{name: "create --help", args: fields("create --help --bundle /b c1"), refused: true},
	{name: "global --help", args: fields("--help create --bundle /b c1"), refused: true},
	{name: "-v", args: fields("-v create --bundle /b c1"), refused: true},
	{name: "global flag without value", args: fields("--root"), refused: true},
	{name: "unknown global flag", args: fields("--bundle /b create c1"), refused: true},
	{name: "--config without value", args: fields("--config"), refused: true, runcArgs: []string{}},
	{name: "bad global after --config", args: fields("--config /c --root"), refused: true, config: "/c", runcArgs: fields("--root")},

	// not a create: passed through
	{name: "empty argument before the command: runc prints help", args: []string{"", "create", "--bundle", "/b", "c1"}, other: true},
	{name: "empty argument after the globals", args: []string{"--root", "/r", "", "create", "c1"}, other: true, root: "/r"},
	{name: "- as the command", args: fields("- create c1"), other: true},
	{name: "start", args: fields("--root /r start c1"), other: true, root: "/r"},
	{name: "state", args: fields("state c1"), other: true},
	{name: "kill", args: fields("kill c1 KILL"), other: true},
	{name: "delete --force", args: fields("--root /r --log /l --log-format json delete --force c1"), other: true,
		root: "/r", log: "/l", logFormat: "json"},
	{name: "exec", args: fields("exec --process /p.json -d c1"), other: true},
	{name: "features", args: fields("features"), other: true},
	{name: "--version", args: fields("--version"), refused: true},
	{name: "no args", args: []string{}, other: true},
	// restore (docker start --checkpoint, containerd's shim with a
	// checkpoint): it creates the container from the bundle as create does
	{name: "restore from containerd's shim", args: fields("--root /run/docker/runtime-runc/moby --log /x/log.json --log-format json restore --image-path /x/checkpoint --work-path /x/work --bundle /x/c9 --pid-file /x/init.pid --detach --manage-cgroups-mode soft c9"),
		id: "c9", bundle: "/x/c9", root: "/run/docker/runtime-runc/moby", log: "/x/log.json", logFormat: "json"},
	{name: "restore with criu's flags after the id", args: fields("restore c9 --tcp-established --empty-ns network -b /b --lazy-pages"), id: "c9", bundle: "/b"},
	{name: "restore without a bundle", args: fields("restore --image-path /ck c9"), id: "c9", bundle: testCwd},
	{name: "restore refuses create's --no-new-keyring", args: fields("restore --no-new-keyring --bundle /b c9"), refused: true},
	{name: "restore without an id", args: fields("restore --bundle /b"), refused: true},
	{name: "checkpoint creates nothing", args: fields("checkpoint --image-path /ck c9"), other: true},
}

func TestParseRuncArgs(t *testing.T) {
	for _, tt := range runcLines {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseRuncArgs(tt.args, testCwd)
			if tt.ambiguous {
				if !errors.Is(err, ErrAmbiguousRuncArgs) {
					t.Fatalf("err = %v, want ErrAmbiguousRuncArgs", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRuncArgs: %v", err)
			}
			switch {
			case tt.refused:
				if c.Admits() || c.Refused == "" {
					t.Fatalf("got %+v, want refused", c)
				}
			case tt.other:
				if c.Admits() || c.Refused != "" || c.Command == "create" || c.Command == "run" {
					t.Fatalf("got %+v, want a command that creates nothing", c)
				}
			default:
				if !c.Admits() || c.ContainerID != tt.id || c.Bundle != tt.bundle || c.Refused != "" {
					t.Fatalf("got %+v (refused %q), want id %q bundle %q", c, c.Refused, tt.id, tt.bundle)
				}
			}
			if c.ConfigPath != tt.config || c.Root != tt.root || c.Log != tt.log || c.LogFormat != tt.logFormat {
				t.Fatalf("config %q root %q log %q format %q, want %q %q %q %q", c.ConfigPath, c.Root, c.Log, c.LogFormat,
					tt.config, tt.root, tt.log, tt.logFormat)
			}
			want := tt.args
			if tt.runcArgs != nil {
				want = tt.runcArgs
			}
			if got := c.Args(); !slices.Equal(got, want) {
				t.Fatalf("Args() = %q, want %q", got, want)
			}
		})
	}
}

// runcBundle makes a bundle the real runc can create a container from: a
// rootfs with an executable entrypoint (never started) and runc's default
// spec without a terminal.
func runcBundle(t *testing.T, runc, dir string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rootfs", "entry"), []byte("#!/never-started\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(runc, "spec", "--bundle", dir).CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v: %s", err, out)
	}
	b, err := LoadBundle(dir)
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	data, _ := os.ReadFile(b.ConfigFile())
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	proc := spec["process"].(map[string]any)
	proc["terminal"], proc["args"] = false, []string{"/entry"}
	spec["root"].(map[string]any)["readonly"] = false
	data, _ = json.Marshal(spec)
	if err := os.WriteFile(b.ConfigFile(), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The wrapper's reading of a line is the installed runc's: what runc
// really created (`runc list`) from each line, run in a working directory
// that is itself a bundle, is the container id and bundle ParseRuncArgs
// gave, or nothing where it said runc refuses; on a line runc versions
// read differently the installed one takes one of the readings.
func TestParseRuncArgsAgainstRealRunc(t *testing.T) {
	testutil.RequireRoot(t)
	runc, err := exec.LookPath("runc")
	if err != nil {
		testutil.SkipOrFail(t, "no runc in PATH (apt-get install runc)")
	}
	base, err := os.MkdirTemp("", "gx-runcargs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	b1, b2 := filepath.Join(base, "b1"), filepath.Join(base, "b2")
	for _, d := range []string{b1, b2} {
		runcBundle(t, runc, d)
	}
	for i, line := range []string{
		"--root {R} --log {R}.log --log-format json create --bundle {B1} --pid-file {R}.pid c1", // containerd's shim
		"--root {R} create --bundle {B1} --pid-file {R}.pid --no-new-keyring c1",                // conmon
		"--root={R} --log-format=text create --pid-file={R}.pid --no-pivot --bundle={B1} c1",
		"--root {R} create c1 --bundle {B1}",
		"--root {R} create --pid-file {R}.pid c1 -b {B1}",
		"--root {R} create c1",
		"--root {R} create --bundle {B1} c1 --bundle {B2}",
		"--root {R} -- create --bundle {B1} c1",
		"--root {R} create --bundle {B1} -- c1",
		"--root {R} create --pid-file -- c1 --bundle {B1}",
		"--root {R} create {B1} c1 -b",
		"--root {R} create --bundle {B1} a,b",
		"--root {R} create --no-pivot c1 --bundle {B1}",
		"--root {R} create -- c1 --bundle {B1}",
		"--root {R} create -b {B1} --bundle {B2} c1",
		"--root {R} create --bundle {B1} c1 c2",
		"--root {R} create --help --bundle {B1} c1",
		"--root {R} create --pid-file --bundle {B1} c1",
		"--root {R} {EMPTY} create --bundle {B1} c1",
		"{EMPTY} --root {R} create --bundle {B1} c1",
		"--root {R} create c1 -b -- --",
	} {
		t.Run(line, func(t *testing.T) {
			root := filepath.Join(base, fmt.Sprintf("state%d", i))
			// the working directory is a bundle, and so is its "--" where a
			// line may name it (runc writes a --pid-file of -- there elsewhere)
			cwd := filepath.Join(base, fmt.Sprintf("cwd%d", i))
			runcBundle(t, runc, cwd)
			if strings.HasSuffix(line, "-- --") {
				runcBundle(t, runc, filepath.Join(cwd, "--"))
			}
			var args []string
			for _, f := range strings.Fields(line) {
				f = strings.NewReplacer("{R}", root, "{B1}", b1, "{B2}", b2).Replace(f)
				if f == "{EMPTY}" {
					f = ""
				}
				args = append(args, f)
			}
			c, perr := ParseRuncArgs(args, cwd)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // only so that a hang fails
			defer cancel()
			// runc's output to a file: a created container's init keeps the
			// stdio it was given open, and a pipe would never reach EOF.
			outFile, err := os.Create(root + ".out")
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.CommandContext(ctx, runc, args...)
			cmd.Dir, cmd.Stdout, cmd.Stderr = cwd, outFile, outFile
			rerr := cmd.Run()
			outFile.Close()
			out, _ := os.ReadFile(root + ".out")
			list, err := exec.CommandContext(ctx, runc, "--root", root, "list", "--format", "json").Output()
			var created []struct{ ID, Bundle string }
			if err == nil && len(strings.TrimSpace(string(list))) > 0 {
				if err := json.Unmarshal(list, &created); err != nil {
					t.Fatalf("runc list: %v: %s", err, list)
				}
			}
			for _, ct := range created {
				exec.CommandContext(ctx, runc, "--root", root, "delete", "--force", ct.ID).Run()
			}
			t.Logf("runc: %v, %d created: %.200s", rerr, len(created), out)
			switch {
			case errors.Is(perr, ErrAmbiguousRuncArgs):
				for _, ct := range created {
					if !strings.Contains(perr.Error(), fmt.Sprintf("id %q, bundle %q", ct.ID, strings.TrimPrefix(ct.Bundle, cwd+"/"))) {
						t.Fatalf("runc created %+v, not one of the readings: %v", ct, perr)
					}
				}
			case perr != nil:
				t.Fatal(perr)
			case c.Admits():
				if len(created) != 1 || created[0].ID != c.ContainerID || created[0].Bundle != c.Bundle {
					t.Fatalf("wrapper: id %q bundle %q; runc created %+v", c.ContainerID, c.Bundle, created)
				}
			default:
				if len(created) != 0 {
					t.Fatalf("wrapper: no container (%q); runc created %+v", c.Refused, created)
				}
			}
		})
	}
}
