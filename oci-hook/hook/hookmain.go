package hook

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/internal/agentapi"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/internal/failmode"
	"github.com/gpuext/gpuext/internal/logging"
)

// EnvConfig names the config file when no --config flag is given.
const EnvConfig = "GPUEXT_CONFIG"

// DefaultConfigPath is used when neither --config nor GPUEXT_CONFIG names a
// config and the file exists; otherwise the built-in defaults apply.
const DefaultConfigPath = config.DefaultPath

// ConfigPath picks the config file: the flag, else $GPUEXT_CONFIG, else
// DefaultConfigPath when it exists, else "" (built-in defaults).
func ConfigPath(flagValue string, getenv func(string) string) string {
	if flagValue != "" {
		return flagValue
	}
	if v := getenv(EnvConfig); v != "" {
		return v
	}
	if _, err := os.Stat(DefaultConfigPath); err == nil {
		return DefaultConfigPath
	}
	return ""
}

// Exit codes of gpuext-oci-hook.
const (
	ExitOK      = 0
	ExitFailed  = 1 // admission refused or failed in strict mode, bad config
	ExitBadArgs = 2 // bad command line or malformed state on stdin
)

const hookUsage = `Usage: gpuext-oci-hook [--config FILE] <stage>

An OCI hook (runtime-spec config.json hooks, oci-hooks(5) hooks.d) that
registers the container's cgroup as a gpuext GPU tenant. It reads the OCI
state from stdin and the bundle's config.json.

Stages:
  prestart, createRuntime   register the cgroup (host pid known, process not started)
  createContainer           register by linux.cgroupsPath (pid is not a host pid here)
  poststop                  detach the cgroup, release an empty tenant

The config file is the gpuext config (docs/configuration.md); without
--config, $GPUEXT_CONFIG, else /etc/gpuext/config.json if it exists, else the
built-in defaults. Logs go to the config's logFile.
`

// HookMain runs gpuext-oci-hook with args (without argv[0]) and returns the
// exit code. Errors the caller must see go to stderr as one line; every
// outcome is logged to the config's log file.
func HookMain(args []string, stdin io.Reader, stderr io.Writer, timeout time.Duration) int {
	fs := flag.NewFlagSet("gpuext-oci-hook", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, hookUsage) }
	cfgFlag := fs.String("config", "", "gpuext config file (JSON); default $GPUEXT_CONFIG, else "+DefaultConfigPath+" if it exists")
	if err := fs.Parse(args); err != nil {
		return ExitBadArgs
	}
	cfgPath := ConfigPath(*cfgFlag, os.Getenv)
	fail := func(code int, err error) int {
		fmt.Fprintln(stderr, "gpuext-oci-hook:", err)
		return code
	}
	cfg, _, err := config.LoadOrDefault(cfgPath) // as the agent: a missing /etc/gpuext/config.json is the defaults
	if err != nil {
		return fail(ExitFailed, err)
	}
	log, closer, err := logging.Setup(cfg.LogFile, cfg.LogLevel, "oci-hook")
	if err != nil {
		return fail(ExitFailed, err)
	}
	defer closer.Close()
	if fs.NArg() != 1 {
		err := fmt.Errorf("want exactly one stage argument, got %d", fs.NArg())
		log.WithField("args", args).WithError(err).Error("bad command line")
		return fail(ExitBadArgs, err)
	}
	stage, err := ParseStage(fs.Arg(0))
	if err != nil {
		log.WithError(err).Error("bad command line")
		return fail(ExitBadArgs, err)
	}
	log = log.WithField("stage", stage)
	st, err := ReadState(stdin, timeout, MaxStateSize)
	if err == nil {
		err = ValidateState(st, stage)
	}
	if err != nil {
		log.WithError(err).Error("malformed OCI state")
		return fail(ExitBadArgs, err)
	}
	log = log.WithField("container", st.ID)
	b, err := LoadBundle(st.Bundle)
	if err != nil {
		if stage != StagePoststop {
			log.WithError(err).Error("cannot read the bundle's config.json")
			return fail(ExitBadArgs, err)
		}
		// Teardown needs only the id; the bundle may be gone already.
		log.WithError(err).Warn("cannot read the bundle's config.json; removing by id")
		b = nil
	}
	info := HookContainerInfo(st, b, stage)
	if err := runHook(cfg, log, stage, info); err != nil {
		if stage == StagePoststop {
			log.WithError(err).Error("gpuext poststop failed; reconcile will drop what is left")
			return ExitOK
		}
		if err := applyFailMode(cfg.FailMode, log, string(stage), info.Name, err); err != nil {
			return fail(ExitFailed, err)
		}
	}
	return ExitOK
}

// runHook asks the agent (internal/agentapi) to register or remove the
// container: the hook holds no core of its own.
func runHook(cfg config.Config, log *logrus.Entry, stage Stage, info agentapi.ContainerInfo) error {
	client := agentapi.NewClient(cfg.AgentSocket, agentapi.DefaultTimeout)
	switch stage {
	case StagePoststop:
		if err := client.Remove(info); err != nil {
			return err
		}
		log.Info("removed tenant cgroup")
		return nil
	default:
		r, err := client.RegisterOCI(info)
		if err != nil {
			return err
		}
		log.WithFields(logrus.Fields{"tenant": r.Tenant, "policy": r.Policy, "cgroupID": r.CgroupID, "skipped": r.Skipped,
			"cgroup": r.CgroupPath, "pid": info.Pid}).Info("registered tenant cgroup")
		return nil
	}
}

// applyFailMode is what the hook and the wrapper do with an error of theirs
// (no agent, an unreadable bundle, a runc line read two ways): the one rule
// (failmode.Apply), for gpuext's own failure (failmode.KindInternal). A
// refusal the agent made already is returned as it is; nil means the
// container runs without gpuext.
func applyFailMode(mode failmode.Mode, log *logrus.Entry, step, name string, err error) error {
	_, err = failmode.Apply(mode, failmode.KindInternal, log, step, name, err)
	return err
}
