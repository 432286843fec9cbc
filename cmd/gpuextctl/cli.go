package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"strings"
	"time"

	"github.com/gpuext/gpuext/internal/config"
)

// parseFlags parses one command's flags. -h or --help prints the command's
// entries of the usage and its flags to out and returns flag.ErrHelp (exit
// 0). A bad flag is one error that names it and says where the flags are
// listed: the flag package's own message and its usage dump are not
// printed, so main prints the problem once.
func parseFlags(fset *flag.FlagSet, args []string, out io.Writer) error {
	fset.SetOutput(io.Discard)
	err := fset.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		printHelp(out, fset)
		return err
	}
	if err != nil {
		return fmt.Errorf("%s: %w (gpuextctl %s --help lists its flags)", fset.Name(), err, fset.Name())
	}
	return nil
}

// printHelp is a command's help: its entries of the usage (every
// subcommand under it) and its flags with their defaults.
func printHelp(out io.Writer, fset *flag.FlagSet) {
	fmt.Fprintln(out, "Usage:")
	for _, e := range usageEntries(fset.Name()) {
		fmt.Fprintf(out, "  gpuextctl %s\n", strings.TrimPrefix(e, "  "))
	}
	n := 0
	fset.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintln(out, "\nFlags:")
		fset.SetOutput(out)
		fset.PrintDefaults()
		fset.SetOutput(io.Discard)
	}
}

// usageEntries are the entries of the usage's command list whose command
// starts with cmd ("policies": the list, show, attached, attach, detach),
// each with its continuation lines.
func usageEntries(cmd string) []string {
	_, list, _ := strings.Cut(usage, "Commands:\n")
	list, _, _ = strings.Cut(list, "\n\n")
	var entries []string
	keep := false
	for _, line := range strings.Split(list, "\n") {
		if strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   ") { // an entry's first line
			rest := strings.TrimPrefix(line, "  ")
			keep = rest == cmd || strings.HasPrefix(rest, cmd+" ")
			if keep {
				entries = append(entries, line)
			}
			continue
		}
		if keep && len(entries) > 0 {
			entries[len(entries)-1] += "\n" + line
		}
	}
	return entries
}

// Output formats of the tables that have a wide form (kubectl's -o).
const (
	outputTable = ""
	outputWide  = "wide"
	outputJSON  = "json"
)

// outputFlags adds -o (wide, json) and --json (the same as -o json) to a
// command; the returned function gives the format asked for after parsing.
func outputFlags(fset *flag.FlagSet) func() (string, error) {
	o := fset.String("o", outputTable, "output format: wide (every column) or json; default: the narrow table")
	asJSON := fset.Bool("json", false, "print JSON (the same as -o json)")
	return func() (string, error) {
		switch *o {
		case outputTable, outputWide, outputJSON:
		default:
			return "", fmt.Errorf("%s: -o %q: want wide or json (or no -o for the narrow table)", fset.Name(), *o)
		}
		if *asJSON {
			if *o == outputWide {
				return "", fmt.Errorf("%s: --json and -o wide: pick one", fset.Name())
			}
			return outputJSON, nil
		}
		return *o, nil
	}
}

// loadConfig reads the config file that --config (or GPUEXT_CONFIG) names.
// As for the agent, config.DefaultPath may be missing. Another file that
// does not exist gives the defaults (the built-in catalog, the
// default pin and state directories) with a warning on stderr, for the
// commands that only read; the commands that change something (mustExist)
// refuse to guess and say so.
func loadConfig(path string, mustExist bool, stderr io.Writer) (config.Config, error) {
	cfg, _, err := config.LoadOrDefault(path) // the agent's rule: config.DefaultPath may be missing
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return cfg, err
	}
	if mustExist {
		return config.Config{}, fmt.Errorf("%w (this command changes the node: name the agent's config file with --config, "+
			"or leave --config out for the defaults)", err)
	}
	fmt.Fprintf(stderr, "gpuextctl: warning: config %s does not exist: using the defaults (docs/configuration.md)\n", path)
	return config.Default(), nil
}

// changesNode: the commands that write the registry, pins, the node's
// directories or a running tenant's policy.
func changesNode(cmd []string) bool {
	if len(cmd) == 0 {
		return false
	}
	switch cmd[0] {
	case "gc", "board", "setup-node":
		return true
	case "tenants":
		return len(cmd) > 1 && cmd[1] == "set-policy"
	case "policies":
		for _, a := range cmd[1:] {
			if a == "attach" || a == "detach" {
				return true
			}
		}
	}
	return false
}

// agentAnswers: something accepts connections at the agent's socket (a
// socket left by a dead agent refuses them).
func agentAnswers(socket string) bool {
	c, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// agentDown is the error for an agent that does not answer at socket:
// the socket, why, and what to do.
func agentDown(socket string, err error) error {
	why := err.Error()
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		why = oe.Err.Error()
		var se *os.SyscallError
		if errors.As(oe.Err, &se) {
			why = se.Err.Error()
		}
	}
	return fmt.Errorf("no gpuext agent answers at %s (%s): start it (gpuext-nri-plugin, with --nri=false on "+
		"Docker/podman hosts; docs/host-agent.md), or name its socket with --socket or the config's agentSocket", socket, why)
}
