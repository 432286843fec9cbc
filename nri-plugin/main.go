// Command gpuext-nri-plugin is the gpuext host agent (internal/hostagent)
// with its containerd NRI adapter (nri-plugin/plugin). It runs as an
// external plugin (connecting to containerd's NRI socket), pre-installed
// (containerd starts it from its plugin dir as NN-gpuext), or without
// containerd (--nri=false, Docker and podman hosts).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/internal/hostagent"
	"github.com/gpuext/gpuext/internal/logging"
	"github.com/gpuext/gpuext/nri-plugin/plugin"
)

func main() {
	cfgPath := flag.String("config", "", "config file (JSON; every field is optional, docs/configuration.md); "+
		"when it is "+config.DefaultPath+" and that does not exist, the defaults are used")
	var nri plugin.Options
	flag.StringVar(&nri.Name, "name", "gpuext", "plugin name")
	flag.StringVar(&nri.Index, "idx", "50", "plugin index for an external plugin (ignored when containerd starts the plugin)")
	flag.StringVar(&nri.Socket, "socket", "", "containerd NRI socket (external plugin; default /var/run/nri/nri.sock)")
	owner := flag.String("owner-daemonset", "", "NAMESPACE/NAME of the DaemonSet that runs this agent (the Helm chart sets it): when that DaemonSet is deleted (helm uninstall) and the agent then exits, it unpins the registry and removes the tenant directories; a restart or rollout keeps them")
	withNRI := flag.Bool("nri", true, "connect to containerd's NRI socket; --nri=false runs the agent alone (Docker/podman hosts: agent API, priority board and reconcile for the runc wrapper and OCI hooks)")
	flag.Usage = usage
	flag.Parse()
	if err := run(*cfgPath, *owner, *withNRI, nri); err != nil {
		fmt.Fprintln(os.Stderr, "gpuext-nri-plugin:", err)
		os.Exit(1)
	}
}

// run starts the agent, with the NRI adapter or alone, until SIGINT or
// SIGTERM (or containerd's connection fails), then stops it.
func run(cfgPath, owner string, withNRI bool, nri plugin.Options) error {
	cfg, defaults, err := config.LoadOrDefault(cfgPath)
	if err != nil {
		return err
	}
	component := "agent"
	if withNRI {
		component = "nri-plugin"
	}
	log, closer, err := logging.Setup(cfg.LogFile, cfg.LogLevel, component)
	if err != nil {
		return err
	}
	defer closer.Close()
	if defaults {
		log.WithField("config", cfgPath).Info("no config file: every setting has its default (docs/configuration.md)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	a := hostagent.New(cfg, log)
	if err := a.WatchOwner(ctx, owner); err != nil {
		return err
	}
	defer a.Stop()
	log.WithField("config", cfgPath).Info("starting")
	if withNRI {
		return plugin.Run(ctx, a, nri) // the services start at containerd's Configure
	}
	if err := a.Start(); err != nil {
		return err
	}
	log.Info("agent running without containerd (API, board, reconcile)")
	<-ctx.Done()
	return nil
}

func usage() {
	fmt.Fprintf(os.Stderr, `Usage: gpuext-nri-plugin [flags]

The gpuext host agent. Gives each container a GPU policy picked by its
labels/annotations (see policies/README.md for the keys) and registers its
cgroup as a GPU tenant; serves the agent API, the priority board, the
periodic reconcile, and (when configured) metrics, the device plugin and the
GPU memory guard.

External plugin:   gpuext-nri-plugin --config /etc/gpuext/config.json --socket /var/run/nri/nri.sock
Docker/podman:     gpuext-nri-plugin --config /etc/gpuext/config.json --nri=false
                   (the host agent alone, without containerd: the runc
                   wrapper and OCI hooks admit and register through its API)
Pre-installed:     copy to containerd's NRI plugin dir as 50-gpuext; put the
                   config JSON in the plugin config dir as 50-gpuext.conf.

Every config field is optional: without --config, or with --config
/etc/gpuext/config.json while that file does not exist, the agent logs that
it uses the defaults (docs/configuration.md lists them).

Flags:
`)
	flag.PrintDefaults()
}
