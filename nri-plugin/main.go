// Command gpuext-nri-plugin is the gpuext containerd NRI plugin. It runs as
// an external plugin (connecting to containerd's NRI socket) or pre-installed
// (containerd starts it from its plugin dir as NN-gpuext).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/containerd/nri/pkg/stub"

	"github.com/gpuext/gpuext/internal/config"
	"github.com/gpuext/gpuext/internal/logging"
	"github.com/gpuext/gpuext/nri-plugin/plugin"
)

func main() {
	cfgPath := flag.String("config", "", "config file (JSON); see docs/configuration.md")
	name := flag.String("name", "gpuext", "plugin name")
	idx := flag.String("idx", "50", "plugin index for an external plugin (ignored when containerd starts the plugin)")
	socket := flag.String("socket", "", "containerd NRI socket (external plugin; default /var/run/nri/nri.sock)")
	withNRI := flag.Bool("nri", true, "connect to containerd's NRI socket; --nri=false runs the agent alone (Docker/podman hosts: priority board and reconcile for the runc wrapper and OCI hooks)")
	flag.Usage = usage
	flag.Parse()
	if !*withNRI {
		if err := runAgent(*cfgPath); err != nil {
			fmt.Fprintln(os.Stderr, "gpuext-nri-plugin:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*cfgPath, *name, *idx, *socket); err != nil {
		fmt.Fprintln(os.Stderr, "gpuext-nri-plugin:", err)
		os.Exit(1)
	}
}

func run(cfgPath, name, idx, socket string) error {
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	log, closer, err := logging.Setup(cfg.LogFile, cfg.LogLevel, "nri-plugin")
	if err != nil {
		return err
	}
	defer closer.Close()
	opts := []stub.Option{stub.WithPluginName(name), stub.WithOnClose(func() { log.Warn("connection to runtime closed") })}
	if os.Getenv("NRI_PLUGIN_IDX") == "" { // external plugin: containerd did not start us
		opts = append(opts, stub.WithPluginIdx(idx))
	}
	if socket != "" {
		opts = append(opts, stub.WithSocketPath(socket))
	}
	s, err := stub.New(plugin.New(cfg, log), opts...)
	if err != nil {
		return fmt.Errorf("create NRI stub: %w", err)
	}
	log.WithField("config", cfgPath).Info("starting")
	return s.Run(context.Background())
}

// runAgent is the host agent without containerd: the same plugin,
// configured once from the config file, until SIGINT or SIGTERM.
func runAgent(cfgPath string) error {
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	log, closer, err := logging.Setup(cfg.LogFile, cfg.LogLevel, "agent")
	if err != nil {
		return err
	}
	defer closer.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	p := plugin.New(cfg, log)
	if _, err := p.Configure(ctx, "", "none", ""); err != nil {
		return err
	}
	log.WithField("config", cfgPath).Info("agent running without containerd (board, reconcile)")
	<-ctx.Done()
	p.Shutdown(context.Background())
	return nil
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

Flags:
`)
	flag.PrintDefaults()
}
