// Package kubeowner tells the agent, when it runs in a Kubernetes
// DaemonSet, whether that DaemonSet was deleted (helm uninstall) rather than
// its pod restarted or rolled: only then does the agent clean the node as it
// exits (unpin the registry, remove tenant directories).
//
// It watches one object, the agent's own DaemonSet, through the API
// server's REST interface with the pod's service-account token, so the
// chart grants it get/list/watch on that one name and nothing else. The
// watch is opened while the chart's RoleBinding still exists; an open watch
// keeps delivering events after the binding is deleted in the same
// uninstall, which a check made at SIGTERM could not rely on.
package kubeowner
