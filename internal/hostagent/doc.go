// Package hostagent is the gpuext host agent: the one long-running owner,
// per host, of the services that outlive a container event, and of their
// lifecycle. The containerd NRI plugin (nri-plugin/plugin) is a small
// adapter over it; on a Docker or podman host (gpuext-nri-plugin
// --nri=false) the agent runs without that adapter, and the runc wrapper
// and the OCI hooks reach it through its API.
//
// What it owns, each started by Start (or the first Reconfigure):
//
//	registry handle + admission core  rebuilt at every Reconfigure (the runtime's config overlaid on the base)
//	priority board publisher          devrt/board; rebuilt with the core (board.go)
//	periodic reconcile                reconcileInterval; rebuilt with the core (reconcile.go)
//	agent API                         internal/agent on agentSocket, once; serves the core of the moment (api.go)
//	metrics                           internal/metrics on metricsAddress, once (metrics.go)
//	device plugin                     internal/deviceplugin, once; every core's GPU memory source (deviceplugin.go)
//	GPU memory guard                  internal/memguard, once, with the containers' termination-message notes (memguard.go)
//	owner watch                       --owner-daemonset: an uninstall empties the node at Stop (owner.go)
//
// Stop stops them all in the reverse order; pinned state stays (but at an
// uninstall).
package hostagent
