package hook

import (
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/gpuext/gpuext/bpf/ids"
	"github.com/gpuext/gpuext/internal/agentapi"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/internal/logging"
)

// DefaultHookName is the hook binary the wrapper adds when the config names
// none; it is looked up next to the wrapper binary.
const DefaultHookName = "gpuext-oci-hook"

// HookTimeout is the timeout (seconds) of the hook entries the wrapper adds.
const HookTimeout = 10

// Exec is the real runc to execute: path and argv (argv[0] included).
type Exec struct {
	Path string
	Argv []string
}

// WrapperEnv is what the wrapper takes from its process.
type WrapperEnv struct {
	Args   []string // without argv[0]
	Cwd    string
	Self   string // the wrapper's own executable (to skip it in PATH, find the hook)
	Getenv func(string) string
	Stderr io.Writer
}

// WrapperMain runs the gpuext part of gpuext-runc and says which runc to
// execute with which arguments. A non-zero code means: print nothing more,
// exit with it (the error is on stderr and in the runc log already).
func WrapperMain(env WrapperEnv) (Exec, int) {
	// A line runc refuses goes to runc (minus our flag), which reports it;
	// perr is a create that runc versions read differently.
	cmd, perr := ParseRuncArgs(env.Args, env.Cwd)
	cfgPath := ConfigPath(cmd.ConfigPath, env.Getenv)
	cfg, _, cfgErr := config.LoadOrDefault(cfgPath) // daemon.json's /etc/gpuext/config.json may be missing: the defaults
	runcCfg := cfg.Runc
	if cfgErr != nil {
		runcCfg = config.DefaultRunc
	}
	runcPath, err := FindRunc(runcCfg, env.Self, env.Getenv("PATH"))
	if err != nil {
		fmt.Fprintln(env.Stderr, "gpuext-runc:", err)
		return Exec{}, ExitFailed
	}
	out := Exec{Path: runcPath, Argv: append([]string{"runc"}, cmd.Args()...)}
	if !cmd.Admits() && perr == nil {
		return out, ExitOK // creates nothing: another command, or a line runc refuses and reports
	}
	if cfgErr != nil {
		// The fail mode itself is unknown: refuse rather than guess.
		err := fmt.Errorf("gpuext: %w", cfgErr)
		reportRuncError(cmd, env.Stderr, err)
		return Exec{}, ExitFailed
	}
	log, closer, err := logging.Setup(cfg.LogFile, cfg.LogLevel, "runc-wrapper")
	if err != nil {
		reportRuncError(cmd, env.Stderr, fmt.Errorf("gpuext: %w", err))
		return Exec{}, ExitFailed
	}
	defer closer.Close()
	log = log.WithFields(logrus.Fields{"container": cmd.ContainerID, "command": cmd.Command, "bundle": cmd.Bundle})
	if perr != nil {
		// Which bundle runc uses, and under which id, depends on its
		// version: nothing is admitted, and the fail mode says whether the
		// container may start without gpuext.
		if err := applyFailMode(cfg.FailMode, log, "parse runc arguments", cmd.ContainerID, perr); err != nil {
			reportRuncError(cmd, env.Stderr, fmt.Errorf("gpuext: %w", err))
			return Exec{}, ExitFailed
		}
		return out, ExitOK // config.json unchanged: the container starts without gpuext
	}
	cmd.Bundle = physicalBundle(env.Cwd, cmd)
	log = log.WithField("bundle", cmd.Bundle)
	hookPath := cfg.HookPath
	if hookPath == "" {
		hookPath = filepath.Join(filepath.Dir(env.Self), DefaultHookName)
	}
	if cfgPath != "" {
		if abs, err := filepath.Abs(cfgPath); err == nil {
			cfgPath = abs
		}
	}
	if err := admitBundle(cfg, log, cmd, hookPath, cfgPath); err != nil {
		// The agent applied the fail mode to its own errors: a refusal
		// passes; anything else came before the agent answered.
		if err := applyFailMode(cfg.FailMode, log, "admit", cmd.ContainerID, err); err != nil {
			reportRuncError(cmd, env.Stderr, fmt.Errorf("gpuext: %w", err))
			return Exec{}, ExitFailed
		}
		return out, ExitOK // config.json unchanged: the container starts without gpuext
	}
	return out, ExitOK
}

// WrapperContainerInfo is the admission core's view of a container the
// wrapper creates. Docker labels (when dockerd's config.v2.json exists) are
// the labels; annotations are config.json's, with the gpuext keys of the
// labels copied over them, so that the hook, which sees only config.json,
// selects exactly what the wrapper selected. A key set both as annotation
// and as label keeps the annotation's value, as selection itself ranks
// container annotations over container labels.
func WrapperContainerInfo(cmd RuncCommand, b *Bundle, dc DockerContainer) agentapi.ContainerInfo {
	ann := map[string]string{}
	maps.Copy(ann, GpuextKeys(dc.Labels))
	maps.Copy(ann, b.Spec.Annotations)
	if dc.Name != "" {
		ann[AnnotationContainerName] = dc.Name
	}
	info := agentapi.ContainerInfo{
		ID:          cmd.ContainerID,
		Name:        ContainerName(cmd.ContainerID, ann),
		Labels:      dc.Labels,
		Annotations: ann,
		Runtime:     ids.RuntimeRuncWrapper,
	}
	if b.Spec.Process != nil {
		info.Env = b.Spec.Process.Env
	}
	if b.Spec.Linux != nil {
		info.CgroupsPath = b.Spec.Linux.CgroupsPath
	}
	info.User = SpecUser(&b.Spec)
	return info
}

// HookEntries are the OCI hooks the wrapper adds: register at createRuntime,
// remove at poststop, both running the hook binary with the same config.
func HookEntries(hookPath, cfgPath string) map[Stage]specs.Hook {
	timeout := HookTimeout
	entry := func(stage Stage) specs.Hook {
		args := []string{filepath.Base(hookPath)}
		if cfgPath != "" {
			args = append(args, "--config", cfgPath)
		}
		return specs.Hook{Path: hookPath, Args: append(args, string(stage)), Timeout: &timeout}
	}
	return map[Stage]specs.Hook{
		StageCreateRuntime: entry(StageCreateRuntime),
		StagePoststop:      entry(StagePoststop),
	}
}

// Inject writes the admission decision into the bundle: the decision
// itself (AnnotationDecision, which the hook registers by), the gpuext keys
// and the name, mounts, env and hooks.
func Inject(b *Bundle, info agentapi.ContainerInfo, d agentapi.Answer, hooks map[Stage]specs.Hook) error {
	inj := d.Injection
	ann := GpuextKeys(info.Annotations)
	if ann == nil {
		ann = map[string]string{}
	}
	ann[agentapi.AnnotationDecision] = d.Decision.Encode()
	if v := info.Annotations[AnnotationContainerName]; v != "" {
		ann[AnnotationContainerName] = v
	}
	if err := b.SetAnnotations(ann); err != nil {
		return err
	}
	if err := b.AddMounts(inj.Mounts); err != nil {
		return err
	}
	if err := b.SetEnv(inj.Env); err != nil {
		return err
	}
	for _, st := range []Stage{StagePrestart, StageCreateRuntime, StageCreateContainer, StagePoststop} {
		if h, ok := hooks[st]; ok {
			if err := b.AddHook(st, h); err != nil {
				return err
			}
		}
	}
	return nil
}

func admitBundle(cfg config.Config, log *logrus.Entry, cmd RuncCommand, hookPath, cfgPath string) error {
	if _, err := os.Stat(hookPath); err != nil {
		return fmt.Errorf("hook binary: %w", err)
	}
	b, err := LoadBundle(cmd.Bundle)
	if err != nil {
		return err
	}
	dc, found, err := ReadDockerContainer(cfg.DockerDataRoot, cmd.ContainerID)
	if err != nil {
		return err
	}
	log.WithFields(logrus.Fields{"dockerConfig": found, "labels": len(dc.Labels)}).Debug("read container metadata")
	info := WrapperContainerInfo(cmd, b, dc)
	client := agentapi.NewClient(cfg.AgentSocket, agentapi.DefaultTimeout)
	d, err := client.Admit(info)
	if err != nil {
		return err
	}
	if d.Skipped {
		return nil // fail-open, logged by the core: config.json unchanged
	}
	if err := Inject(b, info, d, HookEntries(hookPath, cfgPath)); err == nil {
		err = b.Write()
	}
	if err != nil {
		// Nothing will run poststop: give the reserved tenant back.
		if rerr := client.Remove(info); rerr != nil {
			log.WithError(rerr).Warn("release reserved tenant")
		}
		return fmt.Errorf("edit %s: %w", b.ConfigFile(), err)
	}
	log.WithFields(logrus.Fields{"tenant": d.Tenant, "policy": d.Policy, "name": info.Name,
		"hook": hookPath}).Info("injected gpuext into config.json")
	if b.Spec.Root != nil && b.Spec.Process != nil {
		root := b.Spec.Root.Path
		if !filepath.IsAbs(root) {
			root = filepath.Join(b.Dir, root)
		}
		if why := PreloadBlocker(root, b.Spec.Process.Args, b.Spec.Process.Env); why != "" {
			log.WithFields(logrus.Fields{"container": info.ID, "name": info.Name, "tenant": d.Tenant}).
				Warn("device runtime will not load in this container's entrypoint: " + why +
					"; the tenant's driver-side policy still applies")
		}
	}
	return nil
}

// physicalBundle is the directory runc chdirs into for the bundle: the
// path as given, its symbolic links resolved before a ".." is applied (as
// the kernel does; filepath.Clean would apply "link/.." to the link's
// name). Where it does not resolve, the lexical path: reading config.json
// there fails with its own error.
func physicalBundle(cwd string, cmd RuncCommand) string {
	p := cmd.BundleArg
	switch {
	case p == "":
		p = cwd
	case !filepath.IsAbs(p):
		p = cwd + "/" + p
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return cmd.Bundle
}

// FallbackPath is searched for runc after PATH.
const FallbackPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// FindRunc resolves the real runc: a path as configured, or a name looked up
// in PATH, skipping the wrapper itself (it may be installed as "runc").
func FindRunc(runc, self, pathEnv string) (string, error) {
	if runc == "" {
		runc = config.DefaultRunc
	}
	selfInfo, selfErr := os.Stat(self)
	isSelf := func(p string) bool {
		fi, err := os.Stat(p)
		return err == nil && selfErr == nil && os.SameFile(fi, selfInfo)
	}
	if strings.Contains(runc, "/") {
		// Checked before admission: a runc that cannot be executed would
		// leave a reserved tenant and an edited config.json behind.
		if err := executable(runc); err != nil {
			return "", fmt.Errorf("runc %q: %w", runc, err)
		}
		if isSelf(runc) {
			return "", fmt.Errorf("runc %q is this wrapper itself", runc)
		}
		return runc, nil
	}
	// conmon (podman) runs the runtime with an empty PATH for some commands.
	for _, dir := range append(filepath.SplitList(pathEnv), filepath.SplitList(FallbackPath)...) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, runc)
		if executable(p) != nil || isSelf(p) {
			continue
		}
		return p, nil
	}
	return "", fmt.Errorf("runc %q: %w in PATH (other than this wrapper)", runc, exec.ErrNotFound)
}

// executable checks that p is a file this process may execute.
func executable(p string) error {
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	case unix.Access(p, unix.X_OK) != nil || fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("not executable (mode %s)", fi.Mode().Perm())
	}
	return nil
}

// reportRuncError tells the caller why create failed: on stderr, and in
// runc's --log file in runc's format, where containerd's shim (Docker) looks
// for the error it shows to the user.
func reportRuncError(cmd RuncCommand, stderr io.Writer, err error) {
	msg := err.Error()
	fmt.Fprintln(stderr, msg)
	if cmd.Log == "" || cmd.Log == "/dev/stderr" {
		return
	}
	f, ferr := os.OpenFile(cmd.Log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if ferr != nil {
		return
	}
	defer f.Close()
	now := time.Now().UTC().Format(time.RFC3339Nano)
	if cmd.LogFormat == "json" {
		lg := logrus.New()
		lg.SetOutput(f)
		lg.SetFormatter(&logrus.JSONFormatter{})
		lg.Error(msg)
		return
	}
	fmt.Fprintf(f, "time=%q level=error msg=%q\n", now, msg)
}
