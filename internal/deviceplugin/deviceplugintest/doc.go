// Package deviceplugintest is the kubelet's side of the device plugin APIs
// (k8s.io/kubelet, the real service definitions) on unix sockets, for tests:
// the registration service that dials a plugin and reads its devices, and
// calls Allocate as the kubelet does (kubelet.go); the pod-resources API
// that answers admission's question "which devices did this container get"
// (podresources.go). Test tooling only: Go tests, and test/gpu/kubeletstub,
// which stands in for the kubelet beside a real agent on a GPU machine.
package deviceplugintest
