package hostagent

import (
	"context"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gpuext/gpuext/internal/admission"
	"github.com/gpuext/gpuext/internal/kubeowner"
)

// WatchOwner starts watching the agent's own DaemonSet (--owner-daemonset
// NAMESPACE/NAME, "" for none) until ctx ends: when that DaemonSet is
// deleted (helm uninstall) and the agent then stops, Stop unpins the
// registry and removes the tenant directories; a restart or rollout keeps
// them. Call it before Start.
func (a *Agent) WatchOwner(ctx context.Context, owner string) error {
	if owner == "" {
		return nil
	}
	ns, name, err := kubeowner.ParseOwner(owner)
	if err != nil {
		return fmt.Errorf("--owner-daemonset: %w", err)
	}
	w, err := kubeowner.InCluster(ns, name, a.Log().WithField("component", "owner-watch"))
	if err != nil {
		return fmt.Errorf("--owner-daemonset %s: %w", owner, err)
	}
	a.owner = w
	go w.Run(ctx)
	return nil
}

// cleanIfUninstalled empties the pin dir and the state dir when the
// agent's DaemonSet was deleted: the uninstall, not a restart.
func (a *Agent) cleanIfUninstalled(log *logrus.Entry) {
	if a.owner == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if !a.owner.Confirm(ctx) {
		log.Info("exiting with the node's tenants kept (the owner daemonset still exists)")
		return
	}
	removed, err := admission.CleanNode(a.base.PinDir, a.base.StateDir)
	l := log.WithFields(logrus.Fields{"pinDir": a.base.PinDir, "stateDir": a.base.StateDir, "emptied": removed})
	if err != nil {
		l.WithError(err).Error("uninstall: node not fully cleaned")
		return
	}
	l.Info("uninstall: registry unpinned and tenant directories removed")
}
