// Package probetest builds device probes for tests: the example probes of
// examples/probes (or any probe source) compiled with clang as the SDK's
// probe.mk does, into a probe directory (the config's probeDir). Only tests
// import it.
package probetest
