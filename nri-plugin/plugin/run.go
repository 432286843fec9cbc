package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/containerd/nri/pkg/stub"

	"github.com/gpuext/gpuext/internal/hostagent"
)

// Options say how the adapter reaches containerd.
type Options struct {
	Name   string // plugin name
	Index  string // plugin index of an external plugin (containerd's NRI_PLUGIN_IDX wins)
	Socket string // containerd's NRI socket of an external plugin ("" for NRI's default)
}

// Run connects the adapter of a to containerd and serves its events until
// ctx ends (nil then) or the connection fails. The agent's services start
// at containerd's first Configure; the caller stops the agent.
func Run(ctx context.Context, a *hostagent.Agent, o Options) error {
	log := a.Log()
	opts := []stub.Option{stub.WithPluginName(o.Name), stub.WithOnClose(func() { log.Warn("connection to runtime closed") })}
	if os.Getenv("NRI_PLUGIN_IDX") == "" { // external plugin: containerd did not start us
		opts = append(opts, stub.WithPluginIdx(o.Index))
	}
	if o.Socket != "" {
		opts = append(opts, stub.WithSocketPath(o.Socket))
	}
	s, err := stub.New(New(a), opts...)
	if err != nil {
		return fmt.Errorf("create NRI stub: %w", err)
	}
	if err := s.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
