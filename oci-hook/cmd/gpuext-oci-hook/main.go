// Command gpuext-oci-hook is the gpuext OCI hook for runc, Docker and podman:
//
//	gpuext-oci-hook [--config FILE] prestart|createRuntime|createContainer|poststop
//
// It reads the OCI state from stdin, registers the container's cgroup as a
// GPU tenant (prestart/createRuntime) or removes it (poststop). The logic
// lives in package oci-hook/hook; see docs/oci-hook.md.
package main

import (
	"os"

	"github.com/gpuext/gpuext/oci-hook/hook"
)

func main() {
	os.Exit(hook.HookMain(os.Args[1:], os.Stdin, os.Stderr, hook.DefaultStateTimeout))
}
