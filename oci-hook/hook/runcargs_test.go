package hook

import (
	"slices"
	"strings"
	"testing"
)

func TestParseRuncArgs(t *testing.T) {
	const cwd = "/cwd"
	dockerCreate := "--root /run/docker/runtime-runc/moby --log /x/log.json --log-format json create --bundle /x/b --pid-file /x/init.pid c1"
	tests := []struct {
		name       string
		args       string
		wantCmd    string
		wantID     string
		wantBundle string
		wantConfig string
		wantArgs   string // args for the real runc; "" = same as args
		wantRoot   string
		wantLog    string
		wantFormat string
		wantErr    string
	}{
		{name: "docker create", args: dockerCreate, wantCmd: "create", wantID: "c1", wantBundle: "/x/b",
			wantRoot: "/run/docker/runtime-runc/moby", wantLog: "/x/log.json", wantFormat: "json"},
		{name: "docker create with the wrapper's --config", args: "--config /etc/gpuext/c.json " + dockerCreate,
			wantCmd: "create", wantID: "c1", wantBundle: "/x/b", wantConfig: "/etc/gpuext/c.json", wantArgs: dockerCreate,
			wantRoot: "/run/docker/runtime-runc/moby", wantLog: "/x/log.json", wantFormat: "json"},
		{name: "--gpuext-config=", args: "--gpuext-config=/c.json --debug create c1", wantCmd: "create", wantID: "c1",
			wantBundle: cwd, wantConfig: "/c.json", wantArgs: "--debug create c1"},
		{name: "--config after other globals", args: "--root /r --config /c.json state c1", wantCmd: "state",
			wantConfig: "/c.json", wantArgs: "--root /r state c1", wantRoot: "/r"},
		{name: "global flags with = and bools", args: "--debug --systemd-cgroup --root=/r --log-format=text --rootless false create -b bun c2",
			wantCmd: "create", wantID: "c2", wantBundle: "/cwd/bun", wantRoot: "/r", wantFormat: "text"},
		{name: "single-dash globals", args: "-root /r -log /l create --bundle=/b c3", wantCmd: "create", wantID: "c3",
			wantBundle: "/b", wantRoot: "/r", wantLog: "/l"},
		{name: "--bundle=", args: "create --bundle=/abs/b/ --console-socket /s c4", wantCmd: "create", wantID: "c4", wantBundle: "/abs/b"},
		{name: "-b relative", args: "create -b ../b c5", wantCmd: "create", wantID: "c5", wantBundle: "/b"},
		{name: "-b=", args: "create -b=/b c5", wantCmd: "create", wantID: "c5", wantBundle: "/b"},
		{name: "no bundle: cwd", args: "create --pid-file /p c6", wantCmd: "create", wantID: "c6", wantBundle: cwd},
		{name: "bool flags before the id", args: "create --no-pivot --no-new-keyring --preserve-fds 2 --bundle /b c7",
			wantCmd: "create", wantID: "c7", wantBundle: "/b"},
		{name: "-- before the id", args: "create --bundle /b -- c8", wantCmd: "create", wantID: "c8", wantBundle: "/b"},
		{name: "run detached", args: "run -d --bundle /b --pid-file /p c9", wantCmd: "run", wantID: "c9", wantBundle: "/b"},
		{name: "run --detach --keep", args: "--root /r run --detach --keep -b /b c10", wantCmd: "run", wantID: "c10",
			wantBundle: "/b", wantRoot: "/r"},
		{name: "create without id", args: "create --bundle /b", wantCmd: "create", wantErr: "no container id"},
		{name: "create flag without value", args: "create --bundle", wantCmd: "create", wantErr: "needs a value"},
		{name: "global flag without value", args: "--root", wantErr: "needs a value"},
		{name: "--config without value", args: "--config", wantErr: "needs a value"},
		{name: "bad global after --config", args: "--config /c --root", wantErr: "needs a value", wantArgs: "--root"},
		{name: "start", args: "--root /r start c1", wantCmd: "start", wantRoot: "/r"},
		{name: "state", args: "state c1", wantCmd: "state"},
		{name: "kill", args: "kill c1 KILL", wantCmd: "kill"},
		{name: "delete --force", args: "--root /r --log /l --log-format json delete --force c1", wantCmd: "delete",
			wantRoot: "/r", wantLog: "/l", wantFormat: "json"},
		{name: "exec with its own --bundle-like flags", args: "exec --process /p.json -d c1", wantCmd: "exec"},
		{name: "features", args: "features", wantCmd: "features"},
		{name: "--version", args: "--version", wantCmd: ""},
		{name: "-v", args: "-v", wantCmd: ""},
		{name: "no args", args: "", wantCmd: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := strings.Fields(tt.args)
			c, err := ParseRuncArgs(args, cwd)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if c.Command != tt.wantCmd {
					t.Fatalf("Command = %q, want %q", c.Command, tt.wantCmd)
				}
				if tt.wantArgs != "" && !slices.Equal(c.Args(), strings.Fields(tt.wantArgs)) {
					t.Fatalf("Args() = %q, want %q", c.Args(), tt.wantArgs)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRuncArgs: %v", err)
			}
			if c.Command != tt.wantCmd || c.ContainerID != tt.wantID || c.Bundle != tt.wantBundle ||
				c.ConfigPath != tt.wantConfig || c.Root != tt.wantRoot || c.Log != tt.wantLog || c.LogFormat != tt.wantFormat {
				t.Fatalf("got %+v", c)
			}
			want := args
			if tt.wantArgs != "" {
				want = strings.Fields(tt.wantArgs)
			}
			if got := c.Args(); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
				t.Fatalf("Args() = %q, want %q", got, want)
			}
			if c.Admits() != (tt.wantCmd == "create" || tt.wantCmd == "run") {
				t.Fatalf("Admits() = %v", c.Admits())
			}
		})
	}
}
