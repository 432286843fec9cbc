// Package pools is a node's GPU memory as the scheduler counts it: the
// devicePlugin section of the agent's config (validated, keyed errors), each
// GPU a pool of units of memory, the device ids that name a unit of a GPU
// ("gpu1-m017"), the packing of a container's units on as few GPUs as
// possible, and what names the GPUs a container is given: their CDI device
// names (cdi.go) and the env that goes with them.
// It has no gRPC: internal/config (which the OCI hooks link) decodes the
// section with it; the device plugin itself is internal/deviceplugin.
package pools
