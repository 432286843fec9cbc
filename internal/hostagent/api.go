package hostagent

import (
	"fmt"

	"github.com/gpuext/gpuext/internal/agent"
	"github.com/gpuext/gpuext/internal/config"
)

// startAPILocked (a.mu held) serves the agent API (internal/agent) once:
// it hands each request to the core of the moment. An agent that cannot
// serve it does not run on without it (the runc wrapper and the hooks would
// apply their fail mode to every container, unseen): the error names the
// socket, and Start or Reconfigure returns it, so the agent exits.
func (a *Agent) startAPILocked(cfg config.Config) error {
	if a.api != nil {
		return nil
	}
	srv, err := agent.Listen(cfg.AgentSocket, func() (agent.Core, error) { return a.Core() }, a.log)
	if err != nil {
		return fmt.Errorf("agent API on %s (agentSocket): %w", cfg.AgentSocket, err)
	}
	a.api = srv
	log := a.log
	go func() {
		if err := srv.Serve(); err != nil {
			log.WithError(err).Error("agent API stopped")
		}
	}()
	log.WithField("socket", cfg.AgentSocket).Info("serving the agent API")
	return nil
}
