package hook

import (
	"fmt"
	"path/filepath"
	"strings"
)

// RuncCommand is what the wrapper understood of a runc command line.
type RuncCommand struct {
	// Global are runc's global flags as given (before the subcommand), without
	// the wrapper's own --config/--gpuext-config flag.
	Global []string
	// Command is the subcommand ("create", "run", "state", ...); empty when
	// only global flags were given (runc --version).
	Command string
	// Rest are the arguments after the subcommand, unchanged.
	Rest []string

	// ConfigPath is the value of the wrapper's --config/--gpuext-config flag.
	ConfigPath string
	// Root, Log and LogFormat are runc's --root, --log and --log-format.
	Root, Log, LogFormat string

	// For create and run: the bundle (absolute, default: the working
	// directory) and the container id (the first positional argument).
	Bundle      string
	ContainerID string
}

// Admits reports whether the command creates a container (create or run):
// the only commands the wrapper acts on.
func (c RuncCommand) Admits() bool { return c.Command == "create" || c.Command == "run" }

// Args returns the argument list for the real runc: the original arguments
// without the wrapper's own flag.
func (c RuncCommand) Args() []string {
	out := make([]string, 0, len(c.Global)+1+len(c.Rest))
	out = append(out, c.Global...)
	if c.Command != "" {
		out = append(out, c.Command)
	}
	return append(out, c.Rest...)
}

// runc's global flags that take a value (runc 1.1 .. 1.3). Bool flags
// (--debug, --systemd-cgroup, --help, --version) take none.
var runcGlobalValueFlags = map[string]bool{
	"log": true, "log-format": true, "root": true, "criu": true, "rootless": true,
}

// Flags of `create` and `run` that take a value. Unknown flags are taken as
// booleans (runc would reject them anyway).
var runcCreateValueFlags = map[string]bool{
	"bundle": true, "b": true, "console-socket": true, "pid-file": true, "preserve-fds": true,
	"pidfd-socket": true,
}

// wrapperConfigFlags are the wrapper's own global flags; they are removed
// before runc runs (runc has no such flag).
var wrapperConfigFlags = map[string]bool{"config": true, "gpuext-config": true}

// splitFlag parses "-x", "--x", "--x=v" into its name and inline value.
func splitFlag(arg string) (name, value string, hasValue, ok bool) {
	if len(arg) < 2 || arg[0] != '-' || arg == "--" {
		return "", "", false, false
	}
	name = strings.TrimLeft(arg, "-")
	if len(arg)-len(name) > 2 || name == "" {
		return "", "", false, false
	}
	name, value, hasValue = strings.Cut(name, "=")
	return name, value, hasValue, true
}

// ParseRuncArgs parses a runc command line (without argv[0]) the way runc's
// CLI (urfave/cli) does: global flags, the subcommand, then for create/run
// the subcommand's flags up to the first positional argument, the container
// id. cwd resolves a missing or relative --bundle. On an error in the global
// flags, Args() still returns the line without the wrapper's flag.
func ParseRuncArgs(args []string, cwd string) (RuncCommand, error) {
	var c RuncCommand
	i := 0
	for i < len(args) {
		arg := args[i]
		name, value, hasValue, ok := splitFlag(arg)
		if !ok {
			break
		}
		if wrapperConfigFlags[name] {
			if !hasValue {
				if i+1 >= len(args) {
					c.Rest = args[i+1:]
					return c, fmt.Errorf("flag --%s needs a value", name)
				}
				value = args[i+1]
				i++
			}
			c.ConfigPath = value
			i++
			continue
		}
		c.Global = append(c.Global, arg)
		i++
		if runcGlobalValueFlags[name] && !hasValue {
			if i >= len(args) {
				// Args() gives runc the line as it was (it reports the error).
				return c, fmt.Errorf("flag --%s needs a value", name)
			}
			value = args[i]
			c.Global = append(c.Global, value)
			i++
		}
		switch name {
		case "root":
			c.Root = value
		case "log":
			c.Log = value
		case "log-format":
			c.LogFormat = value
		}
	}
	if i < len(args) && args[i] == "--" {
		// runc treats "--" before the subcommand as the end of flags.
		c.Global = append(c.Global, args[i])
		i++
	}
	if i >= len(args) {
		return c, nil
	}
	c.Command = args[i]
	c.Rest = args[i+1:]
	if !c.Admits() {
		return c, nil
	}
	bundle := ""
	rest := c.Rest
	for j := 0; j < len(rest); j++ {
		name, value, hasValue, ok := splitFlag(rest[j])
		if !ok {
			if rest[j] == "--" {
				j++
			}
			if j < len(rest) {
				c.ContainerID = rest[j]
			}
			break
		}
		if runcCreateValueFlags[name] && !hasValue {
			if j+1 >= len(rest) {
				return c, fmt.Errorf("%s: flag -%s needs a value", c.Command, name)
			}
			j++
			value = rest[j]
		}
		if name == "bundle" || name == "b" {
			bundle = value
		}
	}
	if c.ContainerID == "" {
		return c, fmt.Errorf("%s: no container id given", c.Command)
	}
	switch {
	case bundle == "":
		c.Bundle = cwd
	case filepath.IsAbs(bundle):
		c.Bundle = filepath.Clean(bundle)
	default:
		c.Bundle = filepath.Join(cwd, bundle)
	}
	return c, nil
}
