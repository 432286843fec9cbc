// Package helm holds the tests of the gpuext Helm chart (deploy/helm/gpuext):
// helm lint, and helm template with default and other values, asserting what
// a cluster would run: the ConfigMap's config decodes strictly as the agent
// decodes it, every host path the agent names is mounted at the same path,
// no RBAC, bad values refused with the value named.
//
// helm comes from .cache/k8s/bin (test/k8s/install.sh, make deps) or
// $GPUEXT_HELM; without it the tests skip, and fail when CI=true.
package helm
