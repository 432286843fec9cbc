// Command gpuext-nri-plugin is the gpuext containerd NRI plugin. It runs as
// an external plugin (connecting to containerd's NRI socket) or pre-installed
// (containerd starts it from its plugin dir as NN-gpuext).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/internal/kubeowner"
	"github.com/gpuext/gpuext/internal/logging"
	"github.com/gpuext/gpuext/nri-plugin/plugin"
)

func main() {
	cfgPath := flag.String("config", "", "config file (JSON; every field is optional, docs/configuration.md); "+
		"when it is "+config.DefaultPath+" and that does not exist, the defaults are used")
	name := flag.String("name", "gpuext", "plugin name")
	idx := flag.String("idx", "50", "plugin index for an external plugin (ignored when containerd starts the plugin)")
	socket := flag.String("socket", "", "containerd NRI socket (external plugin; default /var/run/nri/nri.sock)")
	owner := flag.String("owner-daemonset", "", "NAMESPACE/NAME of the DaemonSet that runs this agent (the Helm chart sets it): when that DaemonSet is deleted (helm uninstall) and the agent then exits, it unpins the registry and removes the tenant directories; a restart or rollout keeps them")
	withNRI := flag.Bool("nri", true, "connect to containerd's NRI socket; --nri=false runs the agent alone (Docker/podman hosts: priority board and reconcile for the runc wrapper and OCI hooks)")
	flag.Usage = usage
	flag.Parse()
	if !*withNRI {
		if err := runAgent(*cfgPath, *owner); err != nil {
			fmt.Fprintln(os.Stderr, "gpuext-nri-plugin:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*cfgPath, *name, *idx, *socket, *owner); err != nil {
		fmt.Fprintln(os.Stderr, "gpuext-nri-plugin:", err)
		os.Exit(1)
	}
}

func run(cfgPath, name, idx, socket, owner string) error {
	cfg, defaults, err := config.LoadOrDefault(cfgPath)
	if err != nil {
		return err
	}
	log, closer, err := logging.Setup(cfg.LogFile, cfg.LogLevel, "nri-plugin")
	if err != nil {
		return err
	}
	defer closer.Close()
	logDefaults(log, cfgPath, defaults)
	opts := []stub.Option{stub.WithPluginName(name), stub.WithOnClose(func() { log.Warn("connection to runtime closed") })}
	if os.Getenv("NRI_PLUGIN_IDX") == "" { // external plugin: containerd did not start us
		opts = append(opts, stub.WithPluginIdx(idx))
	}
	if socket != "" {
		opts = append(opts, stub.WithSocketPath(socket))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	w, err := watchOwner(ctx, owner, log)
	if err != nil {
		return err
	}
	p := plugin.New(cfg, log)
	s, err := stub.New(p, opts...)
	if err != nil {
		return fmt.Errorf("create NRI stub: %w", err)
	}
	log.WithField("config", cfgPath).Info("starting")
	err = s.Run(ctx)
	p.Shutdown(context.Background())
	cleanIfUninstalled(w, cfg, log)
	if errors.Is(err, context.Canceled) {
		return nil // SIGTERM or SIGINT
	}
	return err
}

// watchOwner starts watching the agent's own DaemonSet when --owner-daemonset is set.
func watchOwner(ctx context.Context, owner string, log *logrus.Entry) (*kubeowner.Watcher, error) {
	if owner == "" {
		return nil, nil
	}
	ns, name, err := kubeowner.ParseOwner(owner)
	if err != nil {
		return nil, fmt.Errorf("--owner-daemonset: %w", err)
	}
	w, err := kubeowner.InCluster(ns, name, log.WithField("component", "owner-watch"))
	if err != nil {
		return nil, fmt.Errorf("--owner-daemonset %s: %w", owner, err)
	}
	go w.Run(ctx)
	return w, nil
}

// cleanIfUninstalled empties the pin dir and the state dir when the
// agent's DaemonSet was deleted: the uninstall, not a restart.
func cleanIfUninstalled(w *kubeowner.Watcher, cfg config.Config, log *logrus.Entry) {
	if w == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if !w.Confirm(ctx) {
		log.Info("exiting with the node's tenants kept (the owner daemonset still exists)")
		return
	}
	removed, err := admission.CleanNode(cfg.PinDir, cfg.StateDir)
	l := log.WithFields(logrus.Fields{"pinDir": cfg.PinDir, "stateDir": cfg.StateDir, "emptied": removed})
	if err != nil {
		l.WithError(err).Error("uninstall: node not fully cleaned")
		return
	}
	l.Info("uninstall: registry unpinned and tenant directories removed")
}

// runAgent is the host agent without containerd: the same plugin,
// configured once from the config file, until SIGINT or SIGTERM.
func runAgent(cfgPath, owner string) error {
	cfg, defaults, err := config.LoadOrDefault(cfgPath)
	if err != nil {
		return err
	}
	log, closer, err := logging.Setup(cfg.LogFile, cfg.LogLevel, "agent")
	if err != nil {
		return err
	}
	defer closer.Close()
	logDefaults(log, cfgPath, defaults)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	w, err := watchOwner(ctx, owner, log)
	if err != nil {
		return err
	}
	p := plugin.New(cfg, log)
	if _, err := p.Configure(ctx, "", "none", ""); err != nil {
		return err
	}
	log.WithField("config", cfgPath).Info("agent running without containerd (board, reconcile)")
	<-ctx.Done()
	p.Shutdown(context.Background())
	cleanIfUninstalled(w, cfg, log)
	return nil
}

// logDefaults says that no config file was read: every field has its default.
func logDefaults(log *logrus.Entry, cfgPath string, defaults bool) {
	if defaults {
		log.WithField("config", cfgPath).Info("no config file: every setting has its default (docs/configuration.md)")
	}
}

func usage() {
	fmt.Fprintf(os.Stderr, `Usage: gpuext-nri-plugin [flags]

Gives each container a GPU policy picked by its labels/annotations (see
policies/README.md for the keys) and registers its cgroup as a GPU tenant.

External plugin:   gpuext-nri-plugin --config /etc/gpuext/config.json --socket /var/run/nri/nri.sock
Docker/podman:     gpuext-nri-plugin --config /etc/gpuext/config.json --nri=false
                   (the host agent alone: priority board, periodic reconcile;
                   the runc wrapper and OCI hooks admit and register)
Pre-installed:     copy to containerd's NRI plugin dir as 50-gpuext; put the
                   config JSON in the plugin config dir as 50-gpuext.conf.

Every config field is optional: without --config, or with --config
/etc/gpuext/config.json while that file does not exist, the agent logs that
it uses the defaults (docs/configuration.md lists them).

Flags:
`)
	flag.PrintDefaults()
}
