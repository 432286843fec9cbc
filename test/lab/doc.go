// Package lab starts the lab's real container runtimes for Go tests.
//
// It is a thin layer over the shell scripts next to it (containerd.sh,
// dockerd.sh, podman.sh, cri.sh): a test gets a private containerd with CRI
// and NRI in its own work dir under /tmp, runs one-container pods through CRI
// (so NRI plugins see them), reads their output, and everything is stopped,
// unmounted and removed in t.Cleanup. The binaries come from
// test/lab/install-deps.sh (`make deps`).
//
// Tests that need the lab skip without root or without the lab binaries,
// except when CI=true: then they fail, so CI never passes by skipping.
package lab
