// Package policies owns the gpuext memory policies: struct_ops programs for
// the gpuext_mem_ops type that the core module (kmod/gpuext) registers, one C
// file each, and the loader that attaches them by name.
//
// A policy only asks: it reads eviction candidates and requests moves
// through the core's kfuncs, which check every request.  Which tenant uses
// which policy is the tenant config's choice (eviction_policy in the
// registry map); attaching a policy makes it available, detaching it
// returns its tenants to the driver's stock behaviour.
package policies
