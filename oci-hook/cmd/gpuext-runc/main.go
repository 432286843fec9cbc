// Command gpuext-runc is a runc wrapper ("runtime") for Docker and podman.
// On `create` and `run` it admits the container through the gpuext admission
// core and writes the device-runtime injection (mounts, env) and the
// gpuext-oci-hook entries into the bundle's config.json; then it executes
// the real runc with the original arguments. It reads the line as runc does
// (hook.ParseRuncArgs: flags before and after the container id, as every
// runc release reads them); a create that runc versions read differently is
// never admitted (strict: refused; fail-open: runc runs it without gpuext),
// and the real runc must be an executable file before anything is admitted.
// Every other runc command is executed untouched. Its own flag, a global
// --config FILE (or env GPUEXT_CONFIG), is removed before runc runs. See
// docs/oci-hook.md.
package main

import (
	"fmt"
	"os"
	"syscall"

	"github.com/gpuext/gpuext/oci-hook/hook"
)

func main() {
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	cwd, _ := os.Getwd()
	run, code := hook.WrapperMain(hook.WrapperEnv{
		Args: os.Args[1:], Cwd: cwd, Self: self, Getenv: os.Getenv, Stderr: os.Stderr,
	})
	if code != hook.ExitOK {
		os.Exit(code)
	}
	err = syscall.Exec(run.Path, run.Argv, os.Environ())
	fmt.Fprintf(os.Stderr, "gpuext-runc: exec %s: %v\n", run.Path, err)
	os.Exit(hook.ExitFailed)
}
