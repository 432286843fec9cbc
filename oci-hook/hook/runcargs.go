package hook

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
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

	// Creates: runc creates a container with this line (a create, run or
	// restore that every runc that runs it at all reads the same way); Bundle and
	// ContainerID are then set.
	Creates bool
	// Refused says why no runc runs the line's command: a usage error, or
	// help or the version asked for ("" when it runs). A create that runc
	// refuses creates nothing: the wrapper passes it on for runc to report.
	Refused string
	// For create, run and restore: the bundle (absolute, default: the working
	// directory), the bundle as given (BundleArg, "" for none) and the
	// container id.
	Bundle      string
	BundleArg   string
	ContainerID string

	hasCommand bool // the line has a command argument (it may be "")
}

// ErrAmbiguousRuncArgs is wrapped by ParseRuncArgs's error for a create or
// run line that runc versions read differently (another container id or
// bundle): the wrapper cannot know which config.json runc will use.
var ErrAmbiguousRuncArgs = errors.New("runc versions read this command line differently")

// Admits reports whether the command creates a container: the only lines
// the wrapper acts on.
func (c RuncCommand) Admits() bool { return c.Creates }

// Args returns the argument list for the real runc: the original arguments
// without the wrapper's own flag.
func (c RuncCommand) Args() []string {
	out := make([]string, 0, len(c.Global)+1+len(c.Rest))
	out = append(out, c.Global...)
	if c.Command != "" || c.hasCommand {
		out = append(out, c.Command)
	}
	return append(out, c.Rest...)
}

// How runc reads its command line. runc's CLI is urfave/cli v1, which parses
// with Go's flag package: flags up to the first argument that is not one
// (a lone "-" or "" is not), "--" ends them, "-x" and "--x" are the same,
// "-x=v" or "-x v" for a flag with a value (the next argument, whatever it
// is), "-x" or "-x=BOOL" for a boolean one; a flag it does not know is a
// usage error. Global flags come before the command. For the command's own
// flags, urfave/cli first moves flags that follow positional arguments in
// front of them (so `runc create ID --bundle B` is --bundle B ID), and how it
// does that changed between releases:
//
//	reorderMoveAll    v1.22.0-1.22.1 (runc <= 1.1 release binaries): every
//	                  "-..." argument moves, with the next one as its value
//	                  unless that starts with "-"; "--" and all after it stay
//	reorderOwnFlags   v1.22.2-1.22.5: only the command's flags move; "--" and
//	                  all after it stay in place
//	reorderDashFirst  v1.22.6-1.22.17 (runc 1.2-1.5, distribution builds of
//	                  1.1 such as Debian's): only the command's flags move,
//	                  with the next argument unless that is one of them ("--"
//	                  may be a value); a "--" that is no value goes first of
//	                  the rest
//
// The flags themselves changed too (runc 1.2 added --pidfd-socket, 1.4
// dropped --criu), and so did the container ids runc accepts. ParseRuncArgs
// reads a line as each combination does and trusts only what they agree on.
type reorder int

const (
	reorderMoveAll reorder = iota
	reorderOwnFlags
	reorderDashFirst
)

func (r reorder) String() string {
	return [...]string{"urfave/cli 1.22.0-1.22.1", "urfave/cli 1.22.2-1.22.5", "urfave/cli 1.22.6-1.22.17"}[r]
}

// flagKind is how Go's flag package reads a flag.
type flagKind int

const (
	flagValue flagKind = iota + 1 // takes a value: "-x v" or "-x=v"
	flagBool                      // "-x" or "-x=BOOL"
	flagInt                       // a value that strconv.ParseInt(v, 0, 64) reads
)

// runcVersion is the set of flags and ids of a runc release line.
type runcVersion struct {
	name   string
	global map[string]flagKind
	create map[string]flagKind // create's flags; run has these and runOnly
	comma  bool                // ',' is allowed in container ids (runc 1.1's regexp)
}

var (
	runcGlobal11 = map[string]flagKind{
		"debug": flagBool, "log": flagValue, "log-format": flagValue, "root": flagValue, "criu": flagValue,
		"systemd-cgroup": flagBool, "rootless": flagValue,
		"help": flagBool, "h": flagBool, "version": flagBool, "v": flagBool, // urfave/cli's own
	}
	runcCreate11 = map[string]flagKind{
		"bundle": flagValue, "b": flagValue, "console-socket": flagValue, "pid-file": flagValue,
		"no-pivot": flagBool, "no-new-keyring": flagBool, "preserve-fds": flagInt,
		"help": flagBool, "h": flagBool,
	}
	runcRunOnly = map[string]flagKind{"detach": flagBool, "d": flagBool, "keep": flagBool, "no-subreaper": flagBool}
	// restore creates a container from the bundle's config.json as create
	// does (runc's startContainer with CT_ACT_RESTORE), then hands the
	// process to criu. Its flags are the same from runc 1.1 to 1.4.
	runcRestore = map[string]flagKind{
		"console-socket": flagValue, "image-path": flagValue, "work-path": flagValue,
		"tcp-established": flagBool, "ext-unix-sk": flagBool, "shell-job": flagBool, "file-locks": flagBool,
		"manage-cgroups-mode": flagValue, "bundle": flagValue, "b": flagValue, "detach": flagBool, "d": flagBool,
		"pid-file": flagValue, "no-subreaper": flagBool, "no-pivot": flagBool, "empty-ns": flagValue,
		"auto-dedup": flagBool, "lazy-pages": flagBool, "lsm-profile": flagValue, "lsm-mount-context": flagValue,
		"help": flagBool, "h": flagBool,
	}

	runcVersions = []runcVersion{
		{name: "runc 1.1", global: runcGlobal11, create: runcCreate11, comma: true},
		{name: "runc 1.2", global: runcGlobal11, create: with(runcCreate11, "pidfd-socket", flagValue)},
		{name: "runc 1.4", global: without(runcGlobal11, "criu"), create: with(runcCreate11, "pidfd-socket", flagValue)},
	}
	runcReorders = []reorder{reorderMoveAll, reorderOwnFlags, reorderDashFirst}
)

// urfave/cli flags with two names, of which a line may use only one.
var runcFlagPairs = [][2]string{{"bundle", "b"}, {"detach", "d"}, {"help", "h"}, {"version", "v"}}

func merge(ms ...map[string]flagKind) map[string]flagKind {
	out := map[string]flagKind{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

func with(m map[string]flagKind, name string, k flagKind) map[string]flagKind {
	return merge(m, map[string]flagKind{name: k})
}

func without(m map[string]flagKind, name string) map[string]flagKind {
	out := map[string]flagKind{}
	for n, v := range m {
		if n != name {
			out[n] = v
		}
	}
	return out
}

// wrapperConfigFlags are the wrapper's own global flags; they are removed
// before runc runs (runc has no such flag).
var wrapperConfigFlags = map[string]bool{"config": true, "gpuext-config": true}

// goFlag is one flag Go's flag package read.
type goFlag struct {
	name, value string
	start, end  int // its arguments: args[start:end]
}

// parseGoFlags reads args as Go's flag package (ContinueOnError) does with
// the given flags: the flags it read, in order, and the arguments after them
// ("--" dropped).
func parseGoFlags(args []string, kinds map[string]flagKind) (flags []goFlag, rest []string, err error) {
	i := 0
	for i < len(args) {
		s := args[i]
		if len(s) < 2 || s[0] != '-' {
			break
		}
		dashes := 1
		if s[1] == '-' {
			dashes = 2
			if len(s) == 2 {
				i++
				break // "--" ends the flags
			}
		}
		name := s[dashes:]
		if name == "" || name[0] == '-' || name[0] == '=' {
			return flags, args[i:], fmt.Errorf("bad flag syntax: %s", s)
		}
		value, hasValue := "", false
		if eq := strings.IndexByte(name[1:], '='); eq >= 0 {
			name, value, hasValue = name[:eq+1], name[eq+2:], true
		}
		kind, ok := kinds[name]
		if !ok {
			return flags, args[i:], fmt.Errorf("flag provided but not defined: -%s", name)
		}
		start := i
		i++
		switch kind {
		case flagBool:
			if !hasValue {
				value = "true"
			}
			if _, err := strconv.ParseBool(value); err != nil {
				return flags, args[start:], fmt.Errorf("invalid boolean value %q for -%s", value, name)
			}
		default:
			if !hasValue {
				if i >= len(args) {
					return flags, args[start:], fmt.Errorf("flag needs an argument: -%s", name)
				}
				value = args[i]
				i++
			}
			if _, err := strconv.ParseInt(value, 0, 64); kind == flagInt && err != nil {
				return flags, args[start:], fmt.Errorf("invalid value %q for flag -%s", value, name)
			}
		}
		flags = append(flags, goFlag{name: name, value: value, start: start, end: i})
	}
	return flags, args[i:], nil
}

// lastValue is the value of the last of the flags with one of names (Go's
// flag package keeps the last), and whether any was given.
func lastValue(flags []goFlag, names ...string) (string, bool) {
	v, ok := "", false
	for _, f := range flags {
		if slices.Contains(names, f.name) {
			v, ok = f.value, true
		}
	}
	return v, ok
}

// isTrue: a boolean flag given and set to true.
func isTrue(flags []goFlag, names ...string) bool {
	v, ok := lastValue(flags, names...)
	b, _ := strconv.ParseBool(v)
	return ok && b
}

// twoForms is urfave/cli's normalizeFlags check: -b and --bundle on one line.
func twoForms(flags []goFlag) error {
	for _, p := range runcFlagPairs {
		_, a := lastValue(flags, p[0])
		_, b := lastValue(flags, p[1])
		if a && b {
			return fmt.Errorf("cannot use two forms of the same flag: %s %s", p[1], p[0])
		}
	}
	return nil
}

// reorderArgs is urfave/cli's reorderArgs of a command's arguments.
func reorderArgs(r reorder, own map[string]flagKind, args []string) []string {
	isOwn := func(arg string) bool { // urfave/cli's argIsFlag
		if arg == "-" || arg == "--" || !strings.HasPrefix(arg, "-") {
			return false
		}
		if strings.HasPrefix(arg, "--") {
			arg = strings.Replace(arg, "-", "", 2)
		}
		if strings.HasPrefix(arg, "-") {
			arg = strings.Replace(arg, "-", "", 1)
		}
		_, ok := own[strings.Split(arg, "=")[0]]
		return ok
	}
	var flags, others []string
	value := false // the next argument may be the value of the last flag moved
	for i, arg := range args {
		switch r {
		case reorderMoveAll:
			switch {
			case arg == "--":
				return append(append(flags, others...), args[i:]...)
			case value && !strings.HasPrefix(arg, "-"):
				value = false
				flags = append(flags, arg)
			case arg != "-" && strings.HasPrefix(arg, "-"):
				flags = append(flags, arg)
				value = !strings.Contains(arg, "=")
			default:
				value = false
				others = append(others, arg)
			}
		case reorderOwnFlags:
			switch {
			case arg == "--":
				return append(append(flags, others...), args[i:]...)
			case value && !strings.HasPrefix(arg, "-"):
				value = false
				flags = append(flags, arg)
			case isOwn(arg):
				flags = append(flags, arg)
				value = !strings.Contains(arg, "=")
			default:
				others = append(others, arg)
			}
		case reorderDashFirst:
			switch {
			case value && !isOwn(arg):
				value = false
				flags = append(flags, arg)
			case arg == "--":
				others = append(append([]string{"--"}, others...), args[i+1:]...)
				return append(flags, others...)
			case isOwn(arg):
				flags = append(flags, arg)
				value = !strings.Contains(arg, "=")
			default:
				others = append(others, arg)
			}
		}
	}
	return append(flags, others...)
}

// validRuncID is runc's validateID: [0-9A-Za-z_+-.]+ (runc 1.1's regexp
// also lets ',' through), not "." or "..".
func validRuncID(id string, comma bool) bool {
	if id == "" || id == "." || id == ".." {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '_' || c == '+' || c == '-' || c == '.' || (comma && c == ',')
		if !ok {
			return false
		}
	}
	return true
}

// createArgs is what one runc reads of create's or run's arguments: the id
// and the bundle as given, or why it refuses them.
type createArgs struct {
	id, bundle string
	refused    string
}

func readCreate(r reorder, v runcVersion, command string, args []string) createArgs {
	own := v.create
	switch command {
	case "run":
		own = merge(own, runcRunOnly)
	case "restore":
		own = runcRestore
	}
	flags, pos, err := parseGoFlags(reorderArgs(r, own, args), own)
	if err == nil {
		err = twoForms(flags)
	}
	switch {
	case err != nil:
		return createArgs{refused: err.Error()}
	case isTrue(flags, "help", "h"):
		return createArgs{refused: "help asked for"}
	case len(pos) != 1:
		return createArgs{refused: fmt.Sprintf("%q requires exactly 1 argument, got %d", command, len(pos))}
	case !validRuncID(pos[0], v.comma):
		return createArgs{refused: fmt.Sprintf("invalid container id %q", pos[0])}
	}
	bundle, _ := lastValue(flags, "bundle", "b")
	return createArgs{id: pos[0], bundle: bundle}
}

// ParseRuncArgs parses a runc command line (without argv[0]) the way runc
// does (see reorder): the wrapper's own --config flag among the global flags,
// runc's global flags, the command, and for create, run and restore the command's
// flags before and after the container id. cwd resolves a missing or
// relative --bundle.
//
// A line every runc refuses, or on which runc only prints help or its
// version, has Refused set and does not admit: runc reports it. A create or
// run that runc versions read differently is an error wrapping
// ErrAmbiguousRuncArgs: some runc would create a container from a bundle or
// with an id the wrapper cannot know.
func ParseRuncArgs(args []string, cwd string) (RuncCommand, error) {
	var c RuncCommand
	flags, rest, err := parseGoFlags(args, merge(runcGlobal11, map[string]flagKind{"config": flagValue, "gpuext-config": flagValue}))
	// Global: the arguments before rest, the wrapper's flags left out.
	used := len(args) - len(rest)
	for i := 0; i < used; {
		if j := slices.IndexFunc(flags, func(f goFlag) bool { return f.start == i }); j >= 0 && wrapperConfigFlags[flags[j].name] {
			i = flags[j].end
			continue
		}
		c.Global = append(c.Global, args[i])
		i++
	}
	c.ConfigPath, _ = lastValue(flags, "config", "gpuext-config")
	c.Root, _ = lastValue(flags, "root")
	c.Log, _ = lastValue(flags, "log")
	c.LogFormat, _ = lastValue(flags, "log-format")
	if err == nil {
		err = twoForms(flags)
	}
	switch {
	case err != nil:
		if f, _, _ := parseGoFlags(rest[:1], map[string]flagKind{"config": flagBool, "gpuext-config": flagBool}); len(f) == 1 {
			rest = rest[1:] // --config without its value: not runc's to see
		}
		c.Rest = rest
		c.Refused = err.Error()
		return c, nil
	case isTrue(flags, "help", "h") || isTrue(flags, "version", "v"):
		c.Rest = rest
		c.Refused = "help or version asked for"
		return c, nil
	case len(rest) == 0:
		return c, nil // runc prints its help
	}
	c.Command, c.Rest, c.hasCommand = rest[0], rest[1:], true
	if c.Command != "create" && c.Command != "run" && c.Command != "restore" {
		// Not a runc command ("", "-", a typo): runc prints its help; any
		// other command creates nothing.
		return c, nil
	}
	_, criu := lastValue(flags, "criu")
	var creates []createArgs
	var readers []string
	c.Refused = "no runc version runs it"
	for _, v := range runcVersions {
		if _, ok := v.global["criu"]; criu && !ok {
			continue // flag provided but not defined: -criu
		}
		for _, r := range runcReorders {
			a := readCreate(r, v, c.Command, c.Rest)
			if a.refused != "" {
				c.Refused = a.refused
				continue
			}
			creates = append(creates, a)
			readers = append(readers, fmt.Sprintf("%s with %s: id %q, bundle %q", v.name, r, a.id, a.bundle))
		}
	}
	if len(creates) == 0 {
		return c, nil
	}
	for _, a := range creates[1:] {
		if a != creates[0] {
			return c, fmt.Errorf("%s %q: %w: %s", c.Command, c.Rest, ErrAmbiguousRuncArgs, strings.Join(readers, "; "))
		}
	}
	c.Refused = ""
	c.Creates = true
	c.ContainerID, c.BundleArg = creates[0].id, creates[0].bundle
	switch {
	case c.BundleArg == "":
		c.Bundle = cwd
	case filepath.IsAbs(c.BundleArg):
		c.Bundle = filepath.Clean(c.BundleArg)
	default:
		c.Bundle = filepath.Join(cwd, c.BundleArg)
	}
	return c, nil
}
